"""``python -m bert_exp.score RUN [--checkpoint PATH] [--submission DIR] [KEY=VALUE ...]``: a fine-tuned run
scored on its validation sets without training again, from its best checkpoint (or ``--checkpoint``) with
the run's own configuration, data and vocabulary; each metric is printed beside the value the run recorded.

``--submission DIR`` also predicts the run's test sets (``data.test_files``: GLUE's test.tsv files, MNLI's
two and the diagnostic AX) and writes them in GLUE's submission form: ``DIR/<name>.tsv`` and
``DIR/submission.zip`` (:mod:`bert_exp.tasks.submission`). Nothing else is written: what validation writes
beside a run (a SQuAD run's ``predictions.json``) goes to a scratch directory removed after, never into the
current directory or the run's own. ``KEY=VALUE`` changes the run's configuration
(:mod:`bert_exp.tools.run_config`). SIGTERM and Ctrl-C stop it with 143 and 130, nothing half-written.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..errors import UserError

SCRATCH_PREFIX = "bert_exp-score-"


def run_checkpoint(run_dir: Path, info: dict) -> Path:
    """The checkpoint a run kept as its best (run.json's, looked for in this run directory's
    ``checkpoints/``: a copied or moved run scores its own files, never the original's); a run that kept
    none (no validation yet) its last.ckpt."""
    folder = run_dir / "checkpoints"
    best = info.get("best_checkpoint")
    if best:
        here = folder / Path(best).name
        if here.is_file():
            return here
        raise UserError(f"{folder}: no {Path(best).name}, the best checkpoint the run recorded (run.json) "
                        "(--checkpoint names another)")
    if (folder / "last.ckpt").is_file():
        return folder / "last.ckpt"
    raise UserError(f"{folder}: no best checkpoint nor last.ckpt to score "
                    "(callbacks.model_checkpoint keeps the best; --checkpoint names another)")


def run_record(run_dir: Path) -> dict:
    """run.json, one line naming it where it is missing or is not JSON."""
    from .run_info import read_info

    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run directory")
    info = read_info(run_dir)
    if not info:
        raise UserError(f"{run_dir}: no run.json (a run directory of python -m bert_exp)")
    return info


def unfinished(run_dir: Path, info: dict) -> str | None:
    """How a run that has not finished stands ("killed at step 12", "interrupted"); one line refusing a run
    still being written."""
    from ..runner.run_dir import lock_is_live, read_lock, run_state

    if info.get("status") == "finished":
        return None
    holder = read_lock(run_dir)
    if info.get("status") == "running" and lock_is_live(holder):
        raise UserError(f"{run_dir}: still running (pid {(holder or {}).get('pid')}); score it when it has finished")
    return run_state(run_dir, info)


def _instantiated(what: str, make):
    """``make()``, a target's own error (Hydra wraps it) as one line."""
    from hydra.errors import InstantiationException

    try:
        return make()
    except InstantiationException as err:
        cause = err.__cause__ or err
        named = isinstance(cause, UserError) or str(cause).startswith(f"{what}.")  # it names its key itself
        raise UserError(str(cause) if named else f"{what}: {cause}") from None


def load_run(run_dir: Path, checkpoint: Path, overrides: list[str], scratch: Path, cfg=None):
    """The run's config (``config.yaml``, with ``overrides``), its DataModule reading the checkpoint's
    vocabulary, the task module with the checkpoint's weights, and a one-device Trainer that logs nothing
    and whose files go to ``scratch``."""
    import lightning as L
    from hydra.utils import instantiate

    from ..data.tokenizer import vocab_list
    from ..runner.run import build_task_module, fetch_inputs
    from ..tasks.checkpoints import load_checkpoint
    from .run_config import run_config

    cfg = cfg if cfg is not None else run_config(run_dir, overrides)
    init = load_checkpoint(checkpoint)
    loader = _instantiated("data.loader", lambda: instantiate(cfg.data.loader, batch_size=int(cfg.global_batch_size)))
    datamodule = _instantiated("data", lambda: instantiate(cfg.data, loader=loader))
    fetch_inputs(datamodule)
    if init.vocab:
        datamodule.use_vocabulary(init.vocab, init.lowercase, init.tokenizer)
    module = _instantiated("task", lambda: build_task_module(cfg, datamodule, vocab_list(datamodule.tokenizer), init))
    precision = cfg.trainer.get("precision")
    for name in ("lightning.pytorch", "lightning.fabric"):  # its device banner and tips: not this tool's output
        logging.getLogger(name).setLevel(logging.WARNING)
    trainer = L.Trainer(accelerator="auto", devices=1, precision=None if precision in (None, "auto") else precision,
                        logger=False, enable_checkpointing=False, enable_model_summary=False, default_root_dir=scratch)
    return cfg, datamodule, module, trainer


@contextmanager
def scratch_directory(prefix: str = SCRATCH_PREFIX):
    """A scratch directory in $TMPDIR named by this process (``bert_exp-score-PID-*``), removed at the end;
    those a killed process left are removed first."""
    from ..records import owned_name, remove_orphans

    remove_orphans(tempfile.gettempdir(), prefix)
    with tempfile.TemporaryDirectory(prefix=owned_name(prefix)) as scratch:
        yield Path(scratch)


def score(run_dir: Path, checkpoint: Path | None, submission: Path | None, overrides: list[str]) -> int:
    from ..tasks.submission import Destination
    from .run_config import run_config

    info = run_record(run_dir)
    state = unfinished(run_dir, info)
    if state is not None and submission is not None and checkpoint is None:
        raise UserError(f"{run_dir}: {state}, not finished: finish the run (the same command continues it) "
                        "before predicting its test sets, or name --checkpoint")
    checkpoint = checkpoint or run_checkpoint(run_dir, info)
    cfg = run_config(run_dir, overrides)  # every override checked before any work
    destination = Destination(submission) if submission is not None else None
    try:
        with scratch_directory() as scratch:
            return _score(run_dir, info, state, checkpoint, destination, overrides, cfg, scratch)
    finally:
        if destination is not None:
            destination.abandon()


def _score(run_dir: Path, info: dict, state: str | None, checkpoint: Path, destination, overrides: list[str], cfg,
           scratch: Path) -> int:
    from ..tasks.submission import read_test_sets, write_submission

    cfg, datamodule, module, trainer = load_run(run_dir, checkpoint, overrides, scratch, cfg)
    tests = None
    if destination is not None:
        from ..datasets.download import require_inputs

        if not getattr(datamodule, "test_files", None):
            raise UserError(f"{run_dir}: its data ({cfg.data._target_.rsplit('.', 1)[-1]}) names no test files "
                            "(data.test_files) to predict")
        require_inputs(datamodule.test_inputs(), datamodule.download)
        tests = read_test_sets(datamodule)  # a bad test file is named before the dev sets are scored
    if state is not None:
        kept = "where it stopped, not a best checkpoint" if checkpoint.name == "last.ckpt" else "its best so far"
        print(f"score: {run_dir} is {state}, not finished: {checkpoint.name} is {kept}")
    trainer.validate(module, datamodule=datamodule, verbose=False)
    monitor, best = info.get("monitor"), info.get("best_score")
    same = info.get("best_checkpoint") and Path(info["best_checkpoint"]).name == checkpoint.name
    print(f"score: {run_dir} with {checkpoint.name}")
    for key, value in sorted(trainer.callback_metrics.items()):
        if key.startswith("val/"):
            beside = f" (the run's best_score {best:.4f})" if key == monitor and same and best is not None else ""
            print(f"  {key} = {float(value):.4f}{beside}")
    if destination is not None:
        files = write_submission(trainer, module, datamodule, destination, read=tests)
        print(f"test predictions: {', '.join(str(f) for f in files)}")
        print(f"to submit: {destination.shown / 'submission.zip'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .stopping import Stopped, stop_on_signals

    parser = argparse.ArgumentParser(prog="python -m bert_exp.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a fine-tuning run directory")
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint of the run other than its best")
    parser.add_argument("--submission", type=Path, metavar="DIR",
                        help="write the test sets' predictions in GLUE's submission form to DIR (new or empty)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="changes to the run's config, before or after the options "
                             "(e.g. paths.data_dir=..., data.loader.eval_batch_size=64)")
    args = parser.parse_intermixed_args(argv)
    try:
        with stop_on_signals():
            if args.checkpoint is not None and not args.checkpoint.is_file():
                raise UserError(f"--checkpoint {args.checkpoint}: no such file")
            return score(args.run, args.checkpoint, args.submission, args.overrides)
    except Stopped as stop:
        print(f"score: {stop}; nothing written", file=sys.stderr)
        return stop.code
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
