"""``python -m bert_exp.score RUN [--checkpoint PATH] [--submission DIR]``: a fine-tuned run scored on its
validation sets without training again, from its best checkpoint (or ``--checkpoint``) with the run's
own configuration, data and vocabulary; each metric is printed beside the value the run recorded.

``--submission DIR`` also predicts the run's test sets (``data.test_files``: GLUE's test.tsv files, MNLI's
two and the diagnostic AX) and writes them in GLUE's submission form: ``DIR/<name>.tsv`` and
``DIR/submission.zip`` (:mod:`bert_exp.tasks.submission`). Nothing else is written: what validation writes
beside a run (a SQuAD run's ``predictions.json``) goes to a scratch directory removed after, never into the
current directory or the run's own.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from ..errors import UserError


def run_checkpoint(run_dir: Path, info: dict) -> Path:
    """The checkpoint a finished run kept as its best (run.json), else its last.ckpt."""
    for candidate in (info.get("best_checkpoint"), run_dir / "checkpoints" / "last.ckpt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
        if candidate:  # a run directory moved since: the same file name in this one
            moved = run_dir / "checkpoints" / Path(candidate).name
            if moved.is_file():
                return moved
    raise UserError(f"{run_dir}/checkpoints: no best checkpoint nor last.ckpt to score "
                    "(callbacks.checkpoint keeps the best; --checkpoint names another)")


def load_run(run_dir: Path, checkpoint: Path, overrides: list[str], scratch: Path):
    """The run's config (``config.yaml``, with ``overrides``), its DataModule reading the checkpoint's
    vocabulary, the task module with the checkpoint's weights, and a one-device Trainer that logs nothing
    and whose files go to ``scratch``."""
    import lightning as L
    from omegaconf import OmegaConf

    from ..data.tokenizer import vocab_list
    from ..runner.run import build_task_module, fetch_inputs
    from ..tasks.checkpoints import load_checkpoint

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{path}: no such file (a run directory of python -m bert_exp holds it)")
    cfg = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides))
    init = load_checkpoint(checkpoint)
    from hydra.utils import instantiate

    loader = instantiate(cfg.data.loader, batch_size=int(cfg.global_batch_size))
    datamodule = instantiate(cfg.data, loader=loader)
    fetch_inputs(datamodule)
    if init.vocab:
        datamodule.use_vocabulary(init.vocab, init.lowercase, init.tokenizer)
    module = build_task_module(cfg, datamodule, vocab_list(datamodule.tokenizer), init)
    precision = cfg.trainer.get("precision")
    for name in ("lightning.pytorch", "lightning.fabric"):  # its device banner and tips: not this tool's output
        logging.getLogger(name).setLevel(logging.WARNING)
    trainer = L.Trainer(accelerator="auto", devices=1, precision=None if precision in (None, "auto") else precision,
                        logger=False, enable_checkpointing=False, enable_model_summary=False, default_root_dir=scratch)
    return cfg, datamodule, module, trainer


def score(run_dir: Path, checkpoint: Path | None, submission: Path | None, overrides: list[str]) -> int:
    from ..runner.run_dir import read_run_info
    from ..tasks.submission import check_destination

    info = read_run_info(run_dir)
    if info is None:
        raise UserError(f"{run_dir}: no run.json (a run directory of python -m bert_exp)")
    checkpoint = checkpoint or run_checkpoint(run_dir, info)
    if submission is not None:
        check_destination(submission)
    with tempfile.TemporaryDirectory(prefix="bert_exp-score-") as scratch:
        return _score(run_dir, info, checkpoint, submission, overrides, Path(scratch))


def _score(run_dir: Path, info: dict, checkpoint: Path, submission: Path | None, overrides: list[str],
           scratch: Path) -> int:
    from ..tasks.submission import write_submission

    cfg, datamodule, module, trainer = load_run(run_dir, checkpoint, overrides, scratch)
    if submission is not None:
        if not getattr(datamodule, "test_files", None):
            raise UserError(f"{run_dir}: its data ({cfg.data._target_.rsplit('.', 1)[-1]}) names no test files "
                            "(data.test_files) to predict")
        from ..datasets.download import require_inputs

        require_inputs(datamodule.test_inputs(), datamodule.download)
    trainer.validate(module, datamodule=datamodule, verbose=False)
    monitor, best = info.get("monitor"), info.get("best_score")
    same = info.get("best_checkpoint") and Path(info["best_checkpoint"]).name == checkpoint.name
    print(f"score: {run_dir} with {checkpoint.name}")
    for key, value in sorted(trainer.callback_metrics.items()):
        if key.startswith("val/"):
            beside = f" (the run's best_score {best:.4f})" if key == monitor and same and best is not None else ""
            print(f"  {key} = {float(value):.4f}{beside}")
    if submission is not None:
        files = write_submission(trainer, module, datamodule, submission)
        print(f"test predictions: {', '.join(str(f) for f in files)}")
        print(f"to submit: {submission / 'submission.zip'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a fine-tuning run directory")
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint of the run other than its best")
    parser.add_argument("--submission", type=Path, metavar="DIR",
                        help="write the test sets' predictions in GLUE's submission form to DIR (new or empty)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="changes to the run's config (e.g. paths.data_dir=..., data.loader.eval_batch_size=64)")
    args = parser.parse_args(argv)
    try:
        if args.checkpoint is not None and not args.checkpoint.is_file():
            raise UserError(f"--checkpoint {args.checkpoint}: no such file")
        return score(args.run, args.checkpoint, args.submission, args.overrides)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
