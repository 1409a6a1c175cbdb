"""``python -m bert_exp.glue SOURCE [--tasks ...] [--lrs ...] [--restarts N] [--out DIR] [--submission]``:
GLUE as BERT's paper reports it (Devlin et al. 2019, Table 1 and section 4.1). SOURCE is fine-tuned on
every task with the paper's recipe (batch 32, 3 epochs, each task's preset), the learning rate chosen
among ``--lrs`` (the paper's 5e-5, 4e-5, 3e-5, 2e-5) by the task's dev metric; ``--restarts N`` runs N
seeds per rate on the small tasks and keeps the best on dev, as the paper did for BERT-large. The table
is printed in the paper's column order with its average (its eight tasks: WNLI left out) and GLUE's own
score beside it (every task, WNLI included; a task with two metrics counts their mean), under the
paper's published BERT-base and BERT-large rows, which are test-set figures where ours are dev.

``--submission`` writes the chosen runs' test-set predictions in GLUE's form (``bert_exp.tools.score``)
and one zip of them all; ``--placeholders`` fills the files of the tasks not run with constant predictions
(the server takes only a zip of all eleven), ``--wnli-majority`` predicts WNLI's majority class, as BERT's
submission did, instead of fine-tuning on it. Every job is a ``python -m bert_exp`` of its own in ``OUT/<task>/<job>``;
running the same command again skips finished jobs and continues an interrupted one.
``python -m bert_exp.report --table --glue RUN ...`` rebuilds the table from run directories.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..records import write_json


@dataclass(frozen=True)
class GlueTask:
    name: str  # run.json's task
    experiment: str  # the preset a job starts from
    column: str  # its column in the paper's Table 1
    table: tuple[str, ...]  # run.json metrics in that column (MNLI: matched and mismatched)
    score: tuple[str, ...]  # the metrics GLUE's score averages for the task
    train_rows: int  # GLUE's training set; under 10k rows the task is "small" (restarts)


TASKS = (  # Table 1's order
    GlueTask("mnli", "glue_mnli_minilm", "MNLI-(m/mm)", ("val/acc", "val/dev_mismatched/acc"),
             ("val/acc", "val/dev_mismatched/acc"), 392_702),
    GlueTask("qqp", "glue_qqp_minilm", "QQP", ("val/f1",), ("val/f1", "val/acc"), 363_846),
    GlueTask("qnli", "glue_qnli_minilm", "QNLI", ("val/acc",), ("val/acc",), 104_743),
    GlueTask("sst2", "sst2_minilm", "SST-2", ("val/acc",), ("val/acc",), 67_349),
    GlueTask("cola", "cola_minilm", "CoLA", ("val/mcc",), ("val/mcc",), 8_551),
    GlueTask("stsb", "glue_stsb_minilm", "STS-B", ("val/spearman",), ("val/spearman", "val/pearson"), 5_749),
    GlueTask("mrpc", "glue_mrpc_minilm", "MRPC", ("val/f1",), ("val/f1", "val/acc"), 3_668),
    GlueTask("rte", "glue_rte_minilm", "RTE", ("val/acc",), ("val/acc",), 2_490),
    GlueTask("wnli", "glue_wnli_minilm", "WNLI", ("val/acc",), ("val/acc",), 635),
)
BY_NAME = {task.name: task for task in TASKS}
PAPER_AVERAGE = tuple(t.name for t in TASKS if t.name != "wnli")  # "we exclude the problematic WNLI set"
SMALL = 10_000
PAPER_LRS = (5e-5, 4e-5, 3e-5, 2e-5)
# BERT's Table 1 (GLUE test server): F1 for QQP and MRPC, Spearman for STS-B, accuracy elsewhere
PAPER_ROWS = {
    "BERT-base (paper, test)": {"mnli": (84.6, 83.4), "qqp": (71.2,), "qnli": (90.5,), "sst2": (93.5,),
                                "cola": (52.1,), "stsb": (85.8,), "mrpc": (88.9,), "rte": (66.4,)},
    "BERT-large (paper, test)": {"mnli": (86.7, 85.9), "qqp": (72.1,), "qnli": (92.7,), "sst2": (94.9,),
                                 "cola": (60.5,), "stsb": (86.5,), "mrpc": (89.3,), "rte": (70.1,)},
}


def points(value: float) -> float:
    return 100.0 * value


def paper_average(cells: dict[str, tuple[float, ...]]) -> float | None:
    """The mean of the table's numbers over the paper's eight tasks (MNLI's two counted apart, as the
    paper's 79.6 and 82.1 are); None while a task is missing."""
    if not all(name in cells for name in PAPER_AVERAGE):
        return None
    return statistics.fmean([v for name in PAPER_AVERAGE for v in cells[name]])


def glue_score(scores: dict[str, float]) -> float | None:
    """GLUE's macro-average: each of the nine tasks' own score (the mean of its metrics), WNLI included."""
    if not all(task.name in scores for task in TASKS):
        return None
    return statistics.fmean(scores[task.name] for task in TASKS)


def run_cells(info: dict) -> tuple[tuple[float, ...], float]:
    """A run's Table 1 numbers and its GLUE task score, in points."""
    task, metrics = BY_NAME[info["task"]], info.get("metrics") or {}
    missing = [m for m in {*task.table, *task.score} if metrics.get(m) is None]
    if missing:
        raise UserError(f"{info.get('run_dir')}: run.json has no {', '.join(sorted(missing))} (a finished GLUE run)")
    return (tuple(points(metrics[m]) for m in task.table),
            statistics.fmean(points(metrics[m]) for m in task.score))


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step a checkpoint was saved at (None where it cannot be read)."""
    import torch

    try:
        return int(torch.load(path, map_location="cpu", weights_only=False, mmap=True).get("global_step"))
    except Exception:  # noqa: BLE001  a damaged or moved checkpoint: the step is unknown
        return None


def at_best_checkpoint(info: dict) -> dict:
    """The run's record with its metrics as they were at its best checkpoint (the one scored again and
    predicting the test sets), read from its CSV log; as recorded at its end where there is no log. Of
    several validations with the best value, the checkpoint's own: ModelCheckpoint keeps the first (it
    replaces its best only on a strictly better value)."""
    from .run_info import read_curves

    run_dir, monitor, best = Path(info.get("run_dir", ".")), info.get("monitor"), info.get("best_score")
    if best is None or not (run_dir / "logs" / "metrics.csv").is_file():
        return info
    curves = read_curves(run_dir)
    steps = [step for step, value in curves.get(monitor, []) if abs(value - best) <= 1e-6 * max(1.0, abs(best))]
    if not steps:
        return info
    kept = info.get("best_checkpoint") and run_dir / "checkpoints" / Path(info["best_checkpoint"]).name
    saved_at = checkpoint_step(kept) if len(steps) > 1 and kept and kept.is_file() else None
    step = saved_at if saved_at in steps else steps[0]
    at = {key: value for key, points in curves.items() if key.startswith("val/")
          for point_step, value in points if point_step == step}
    return {**info, "metrics": {**(info.get("metrics") or {}), **at}, "best_step": step}


def best_per_task(infos: list[dict]) -> dict[str, dict]:
    """For each task, the run whose monitored dev metric is highest at its best checkpoint (the paper's
    choice on dev), its metrics those of that checkpoint."""
    chosen: dict[str, dict] = {}
    for info in map(at_best_checkpoint, infos):
        name = info.get("task")
        if name not in BY_NAME:
            raise UserError(f"{info.get('run_dir')}: task {name!r} is not a GLUE task ({', '.join(BY_NAME)})")
        value = (info.get("metrics") or {}).get(info.get("monitor"))
        if value is None:
            raise UserError(f"{info.get('run_dir')}: no {info.get('monitor')} in run.json (a finished run)")
        if name not in chosen or value > chosen[name]["metrics"][chosen[name]["monitor"]]:
            chosen[name] = info
    return chosen


def _number(values: tuple[float, ...] | None) -> str:
    return "-" if values is None else "/".join(f"{v:.1f}" for v in values)


def glue_table(chosen: dict[str, dict], label: str = "ours (dev)") -> str:
    """Table 1's columns and average, GLUE's score, WNLI; the paper's rows first."""
    header = [t.column for t in TASKS if t.name != "wnli"] + ["Average", "WNLI", "GLUE score"]
    lines = ["| system | " + " | ".join(header) + " |", "|---|" + "---:|" * len(header)]
    for name, cells in PAPER_ROWS.items():
        row = [_number(cells.get(t.name)) for t in TASKS if t.name != "wnli"]
        lines.append(f"| {name} | " + " | ".join(row) + f" | {paper_average(cells):.1f} | - | - |")
    cells, scores = {}, {}
    for name, info in chosen.items():
        cells[name], scores[name] = run_cells(info)
    average, score = paper_average(cells), glue_score(scores)
    row = [_number(cells.get(t.name)) for t in TASKS if t.name != "wnli"]
    row += ["-" if average is None else f"{average:.1f}", _number(cells.get("wnli")),
            "-" if score is None else f"{score:.1f}"]
    lines.append(f"| {label} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def task_named(name: str, flag: str = "--tasks") -> str:
    if name in BY_NAME:
        return name
    import difflib

    close = difflib.get_close_matches(name.lower(), BY_NAME, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UserError(f"{flag} {name}: no such GLUE task; {hint}(the tasks: {', '.join(BY_NAME)})")


def preset_config(task: GlueTask, overrides: list[str]):
    """The config a job of ``task`` composes (uninterpolated: nothing is read or resolved)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from ..resources import resource_dir

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
            return compose("config", overrides=[f"+experiment={task.experiment}", *overrides])
    except HydraException as err:
        raise UserError(f"{task.name} ({task.experiment}): {str(err).strip().splitlines()[0]}") from None
    finally:
        GlobalHydra.instance().clear()


def check_presets(tasks: list[GlueTask], extra: list[str], submission: bool, placeholders: bool) -> list[GlueTask]:
    """Before any job: each preset fine-tunes its own task, and, for a submission, names GLUE's test files
    (the tasks whose preset names none are returned: placeholders stand in for them, or it is refused)."""
    from omegaconf import OmegaConf

    without_tests = []
    for task in tasks:
        cfg = preset_config(task, extra)
        runs = OmegaConf.select(cfg, "task.name", default=None)
        if runs != task.name:
            raise UserError(f"--experiment {task.name}={task.experiment}: that preset fine-tunes {runs}, not "
                            f"{task.name} (its column would hold another task's results)")
        if submission and not OmegaConf.select(cfg, "data.test_files", default=None):
            if not placeholders:
                raise UserError(f"--submission: {task.name}'s preset {task.experiment} names no test files "
                                "(data.test_files: its rows are not GLUE's split); --placeholders writes constant "
                                "predictions in their place, or leave it out of --tasks")
            without_tests.append(task)
    return without_tests


def with_preset(task: GlueTask, choices: list[str]) -> GlueTask:
    """The task with the preset ``--experiment TASK=PRESET`` names for it, if any."""
    from dataclasses import replace

    for choice in choices:
        name, sep, preset = choice.partition("=")
        if not sep or not preset:
            raise UserError(f"--experiment {choice}: expected TASK=PRESET (e.g. rte=glue_rte_minilm_local)")
        if task_named(name, f"--experiment {choice}:") == task.name:
            from ..runner.config_search import group_options

            presets = sorted(group_options("experiment"))  # bert_exp's and $BERT_EXP_CONFIG_PATH's
            if preset not in presets:
                import difflib

                close = difflib.get_close_matches(preset, presets, n=1)
                raise UserError(f"--experiment {choice}: no preset {preset!r} in conf/experiment"
                                " or $BERT_EXP_CONFIG_PATH's experiment/"
                                + (f"; did you mean {close[0]}?" if close else ""))
            return replace(task, experiment=preset)
    return task


def glue_runs_table(directories: list[Path]) -> str:
    """GLUE's table from run directories (or directories holding them, as the glue tool's --out does)."""
    from ..runner.run_dir import run_state
    from .run_info import read_info

    runs = []
    for directory in map(Path, directories):
        found = [directory] if (directory / "run.json").is_file() else sorted(
            p.parent for p in directory.glob("**/run.json"))
        if not found:
            raise UserError(f"{directory}: no run.json in it or under it")
        runs += found
    infos = []
    for run_dir in runs:
        info = read_info(run_dir)
        if info.get("status") != "finished":
            raise UserError(f"{run_dir}: {run_state(run_dir, info)}, not finished (GLUE's table reads finished runs)")
        infos.append(dict(info, run_dir=str(run_dir)))
    return glue_table(best_per_task(infos))


def job_overrides(task: GlueTask, source_overrides: list[str], lr: float, seed: int, extra: list[str]) -> list[str]:
    return [f"+experiment={task.experiment}", "model=from_checkpoint", *source_overrides,
            f"optim.optimizer.lr={lr:g}", f"seed={seed}", "resume_in_place=true", "logger=csv", *extra]


def run_jobs(source, tasks: list[GlueTask], lrs: list[float], restarts: int, first_seed: int, out: Path,
             extra: list[str], dry_run: bool = False) -> list[dict]:
    """Every (task, rate, seed) job, run or read when finished earlier; their run.json records."""
    from .evaluate import run_job

    infos = []
    for task in tasks:
        seeds = range(first_seed, first_seed + (restarts if task.train_rows < SMALL else 1))
        for lr in lrs:
            for seed in seeds:
                job_dir = out / task.name / f"lr{lr:g}-seed{seed}"
                info = run_job(job_dir, job_overrides(task, source.overrides, lr, seed, extra),
                               f"glue: {task.name} lr {lr:g} seed {seed}", dry_run)
                if info is None:
                    continue
                infos.append(dict(info, run_dir=str(job_dir), lr=lr, seed=seed))
    return infos


MADE_FROM = "made_from.json"  # what a task's predictions were made from: its checkpoint and test files


def made_from(checkpoint: Path, datamodule) -> dict:
    """The content a task's predictions depend on: the checkpoint's and each test file's sha256."""
    from ..data.hashing import file_sha256

    return {"checkpoint_sha256": file_sha256(checkpoint),
            "test_files": {name: file_sha256(Path(path)) for name, path in datamodule.test_files.items()}}


def write_run_predictions(info: dict, target: Path) -> list[Path]:
    """The chosen run's test predictions in ``target``, reused when an earlier call made them from the
    same checkpoint and test files (another run chosen since, or the files changed: made again)."""
    import json
    import shutil

    from ..datasets.download import require_inputs
    from ..tasks.submission import read_test_sets, write_submission
    from .score import load_run, run_checkpoint, scratch_directory

    run_dir = Path(info["run_dir"])
    checkpoint = run_checkpoint(run_dir, info)
    with scratch_directory("bert_exp-glue-") as scratch:
        _, datamodule, module, trainer = load_run(run_dir, checkpoint, [], scratch)
        require_inputs(datamodule.test_inputs(), datamodule.download)
        key = made_from(checkpoint, datamodule)
        try:
            earlier = json.loads((target / MADE_FROM).read_text())
        except (OSError, ValueError):
            earlier = None
        if earlier == key:
            return sorted(target.glob("*.tsv"))
        tests = read_test_sets(datamodule)
        if target.exists():  # another run's predictions, or made from other files
            shutil.rmtree(target)
        return write_submission(trainer, module, datamodule, target, read=tests, records={MADE_FROM: key})


def write_submissions(chosen: dict[str, dict], out: Path, placeholders: bool,
                      wnli_majority: str | None = None) -> tuple[Path, list[str], list[str]]:
    """Each chosen run's test predictions (``out/submission/<task>/``) and one zip of every file, with
    constant predictions for GLUE's files no run made when ``placeholders``; the zip, the files from runs
    and the files missing (or filled)."""
    from ..tasks.submission import GLUE_TEST_SETS, Destination, constant_file, zip_submissions

    files = []
    for name, info in chosen.items():
        if info.get("run_dir"):
            files += write_run_predictions(info, out / "submission" / name)
    made = [f.stem for f in files]
    constants = {}
    if wnli_majority is not None:
        constants["WNLI"] = constant_file("WNLI", wnli_majority)
        made.append("WNLI")
    missing = [name for name in GLUE_TEST_SETS if name not in made and name not in constants]
    if placeholders:
        constants.update({name: constant_file(name) for name in missing})
    if constants:
        import shutil

        target = out / "submission" / "constant"
        shutil.rmtree(target, ignore_errors=True)
        files += Destination(target).write(constants)
    return zip_submissions(files, out / "glue_submission.zip"), made, missing


def wnli_majority(task: GlueTask, extra: list[str]) -> dict:
    """WNLI answered as BERT's submission answered it ("we predict the majority class", Devlin et al. 2019,
    section 4.1): the class most frequent in its monitored dev set (GLUE's: 0, 40 of its 71 rows), and the
    accuracy that answer has there; no fine-tuning."""
    from collections import Counter

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from ..runner import resolvers  # noqa: F401  the resolvers of the data's paths
    from ..runner.run import fetch_inputs
    from ..tasks.submission import label_names

    cfg = preset_config(task, extra)
    OmegaConf.resolve(cfg.data)
    datamodule = instantiate(cfg.data, loader=instantiate(cfg.data.loader, batch_size=1))
    fetch_inputs(datamodule)
    name, path = next(iter(datamodule.val_files.items()))
    rows = datamodule.train_and_held_out()[1] if datamodule.hold_out else datamodule.read(path)
    counts = Counter(row.label for row in rows)
    label, count = max(sorted(counts.items()), key=lambda item: item[1])
    spelt = label_names(datamodule.label_map).get(label, str(label))
    return {"task": "wnli", "monitor": "val/acc", "metrics": {"val/acc": count / len(rows)}, "run_dir": None,
            "lr": None, "seed": None, "majority_class": spelt, "dev_rows": len(rows), "dev_set": name}


def main(argv: list[str] | None = None) -> int:
    from .stopping import Stopped, stop_on_signals

    parser = argparse.ArgumentParser(prog="python -m bert_exp.glue", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="run dir, .ckpt, exported/HF dir or hf:NAME (as python -m bert_exp.evaluate)")
    parser.add_argument("--tasks", nargs="+", default=[t.name for t in TASKS], help=f"default: {' '.join(BY_NAME)}")
    parser.add_argument("--experiment", action="append", default=[], metavar="TASK=PRESET",
                        help="another preset for a task (e.g. rte=glue_rte_minilm_local: the rows in the data "
                             "directory)")
    parser.add_argument("--lrs", nargs="+", type=float, default=list(PAPER_LRS),
                        help="learning rates to choose from on dev (default the paper's 5e-5 4e-5 3e-5 2e-5)")
    parser.add_argument("--restarts", type=int, default=1,
                        help=f"seeds per rate on the small tasks (under {SMALL:,} training rows), best kept on dev")
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("outputs/glue"))
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every job (e.g. hardware=gpu)")
    parser.add_argument("--submission", action="store_true",
                        help="the chosen runs' test predictions in GLUE's form, and one zip of them")
    parser.add_argument("--placeholders", action="store_true",
                        help="with --submission: constant predictions in the files of the tasks not run (the "
                             "server takes only a zip of all eleven; those tasks then score as a constant)")
    parser.add_argument("--wnli-majority", action="store_true",
                        help="WNLI not fine-tuned: its dev column and test predictions are its dev set's majority "
                             "class, as BERT's submission did")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs that would run")
    args = parser.parse_args(argv)
    from .evaluate import EvaluateInterrupted, parse_source

    try:
        with stop_on_signals():
            return run_tool(args, parse_source)
    except EvaluateInterrupted as err:
        print(f"glue: {err}", file=sys.stderr)
        return err.code
    except Stopped as stop:
        print(f"glue: {stop}; finished jobs are kept, nothing half-written", file=sys.stderr)
        return stop.code
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def run_tool(args, parse_source) -> int:
    if args.restarts < 1:
        raise UserError("--restarts must be at least 1")
    if len(set(args.tasks)) != len(args.tasks) or len(set(args.lrs)) != len(args.lrs):
        raise UserError("--tasks and --lrs name each value once")
    if args.placeholders and not args.submission:
        raise UserError("--placeholders fills a submission's missing files: give --submission too")
    for override in args.override:
        if override.lstrip("+~").partition("=")[0] in ("seed", "optim.optimizer.lr"):
            raise UserError(f"--override {override}: the tool sets each job's seed and rate; use "
                            "--first-seed, --restarts and --lrs")
    tasks = [with_preset(BY_NAME[name], args.experiment) for name in map(task_named, args.tasks)]
    majority_task = next((t for t in tasks if t.name == "wnli"), None) if args.wnli_majority else None
    if args.wnli_majority and majority_task is None:
        raise UserError("--wnli-majority answers WNLI: keep wnli in --tasks")
    tuned = [t for t in tasks if t is not majority_task]
    without_tests = check_presets(tuned, args.override, args.submission, args.placeholders)
    source = parse_source(args.source, args.out)
    infos = run_jobs(source, tuned, args.lrs, args.restarts, args.first_seed, args.out, args.override, args.dry_run)
    if args.dry_run:
        return 0
    chosen = best_per_task(infos)
    if majority_task is not None:
        chosen["wnli"] = wnli_majority(majority_task, args.override)
    table = glue_table(chosen)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "glue.md").write_text(table, encoding="utf-8")
    write_json(args.out / "glue.json", {"source": source.path, "chosen": {
        name: {"run_dir": info["run_dir"], "lr": info["lr"], "seed": info["seed"],
               **({"majority_class": info["majority_class"], "dev_rows": info["dev_rows"]}
                  if "majority_class" in info else {}),
               "metrics": {k: v for k, v in info["metrics"].items() if k.startswith("val/")}}
        for name, info in chosen.items()}}, indent=2)
    print(table, end="")
    print(f"glue: table in {args.out}/glue.md; chosen runs in {args.out}/glue.json")
    if args.submission:
        no_tests = {task.name for task in without_tests}  # placeholders stand in for them
        for_zip = {name: info for name, info in chosen.items() if name not in no_tests}
        majority = chosen["wnli"]["majority_class"] if majority_task is not None else None
        archive, made, missing = write_submissions(for_zip, args.out, args.placeholders, majority)
        if not missing:
            print(f"glue: test predictions for gluebenchmark.com: {archive}")
        elif args.placeholders:
            print(f"glue: test predictions for gluebenchmark.com: {archive}; constant placeholders (not predictions) "
                  f"for {', '.join(missing)}")
        else:
            print(f"glue: a partial submission, {archive}: {', '.join(made) or 'no file'} of GLUE's 11 test files; "
                  f"gluebenchmark.com takes only all of them (missing {', '.join(missing)}; --placeholders fills "
                  "them with constant predictions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
