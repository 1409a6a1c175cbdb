"""``python -m bert_exp.glue SOURCE [--tasks ...] [--lrs ...] [--restarts N] [--out DIR] [--submission]``:
GLUE as BERT's paper reports it (Devlin et al. 2019, Table 1 and section 4.1). SOURCE is fine-tuned on
every task with the paper's recipe (batch 32, 3 epochs, each task's preset), the learning rate chosen
among ``--lrs`` (the paper's 5e-5, 4e-5, 3e-5, 2e-5) by the task's dev metric; ``--restarts N`` runs N
seeds per rate on the small tasks and keeps the best on dev, as the paper did for BERT-large. The table
is printed in the paper's column order with its average (its eight tasks: WNLI left out) and GLUE's own
score beside it (every task, WNLI included; a task with two metrics counts their mean), under the
paper's published BERT-base and BERT-large rows, which are test-set figures where ours are dev.

``--submission`` writes the chosen runs' test-set predictions in GLUE's form (``bert_exp.tools.score``)
and one zip of them all. Every job is a ``python -m bert_exp`` of its own in ``OUT/<task>/<job>``;
running the same command again skips finished jobs and continues an interrupted one.
``python -m bert_exp.report --table --glue RUN ...`` rebuilds the table from run directories.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
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


def at_best_checkpoint(info: dict) -> dict:
    """The run's record with its metrics as they were at its best checkpoint (the one scored again and
    predicting the test sets), read from its CSV log; as recorded at its end where there is no log."""
    from .run_info import read_curves

    run_dir, monitor, best = Path(info.get("run_dir", ".")), info.get("monitor"), info.get("best_score")
    if best is None or not (run_dir / "logs" / "metrics.csv").is_file():
        return info
    curves = read_curves(run_dir)
    steps = [step for step, value in curves.get(monitor, []) if abs(value - best) <= 1e-6 * max(1.0, abs(best))]
    if not steps:
        return info
    at = {key: value for key, points in curves.items() if key.startswith("val/")
          for step, value in points if step == steps[-1]}
    return {**info, "metrics": {**(info.get("metrics") or {}), **at}, "best_step": steps[-1]}


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


def with_preset(task: GlueTask, choices: list[str]) -> GlueTask:
    """The task with the preset ``--experiment TASK=PRESET`` names for it, if any."""
    from dataclasses import replace

    for choice in choices:
        name, sep, preset = choice.partition("=")
        if not sep or not preset:
            raise UserError(f"--experiment {choice}: expected TASK=PRESET (e.g. rte=glue_rte_minilm_local)")
        if task_named(name, f"--experiment {choice}:") == task.name:
            from ..resources import resource_dir

            presets = sorted(p.stem for p in (resource_dir("conf") / "experiment").glob("*.yaml"))
            if preset not in presets:
                import difflib

                close = difflib.get_close_matches(preset, presets, n=1)
                raise UserError(f"--experiment {choice}: no preset {preset!r} in conf/experiment"
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


def write_submissions(chosen: dict[str, dict], out: Path) -> Path:
    """Each chosen run's test predictions (``out/submission/<task>/``), and one zip of every file."""
    from ..tasks.submission import zip_submissions
    from .score import load_run, run_checkpoint

    files = []
    for name, info in chosen.items():
        run_dir = Path(info["run_dir"])
        target = out / "submission" / name
        if not (target / "submission.zip").is_file():  # written by an earlier call
            from ..datasets.download import require_inputs
            from ..tasks.submission import write_submission

            with tempfile.TemporaryDirectory(prefix="bert_exp-glue-") as scratch:
                _, datamodule, module, trainer = load_run(run_dir, run_checkpoint(run_dir, info), [], Path(scratch))
                require_inputs(datamodule.test_inputs(), datamodule.download)
                write_submission(trainer, module, datamodule, target)
        files += sorted(target.glob("*.tsv"))
    return zip_submissions(files, out / "glue_submission.zip")


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--dry-run", action="store_true", help="print the jobs that would run")
    args = parser.parse_args(argv)
    from .evaluate import EvaluateInterrupted, parse_source

    try:
        if args.restarts < 1:
            raise UserError("--restarts must be at least 1")
        if len(set(args.tasks)) != len(args.tasks) or len(set(args.lrs)) != len(args.lrs):
            raise UserError("--tasks and --lrs name each value once")
        for override in args.override:
            if override.lstrip("+~").partition("=")[0] in ("seed", "optim.optimizer.lr"):
                raise UserError(f"--override {override}: the tool sets each job's seed and rate; use "
                                "--first-seed, --restarts and --lrs")
        source = parse_source(args.source, args.out)
        tasks = [with_preset(BY_NAME[name], args.experiment) for name in map(task_named, args.tasks)]
        infos = run_jobs(source, tasks, args.lrs, args.restarts, args.first_seed, args.out, args.override,
                         args.dry_run)
        if args.dry_run:
            return 0
        chosen = best_per_task(infos)
        table = glue_table(chosen)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "glue.md").write_text(table, encoding="utf-8")
        write_json(args.out / "glue.json", {"source": source.path, "chosen": {
            name: {"run_dir": info["run_dir"], "lr": info["lr"], "seed": info["seed"],
                   "metrics": {k: v for k, v in info["metrics"].items() if k.startswith("val/")}}
            for name, info in chosen.items()}}, indent=2)
        print(table, end="")
        print(f"glue: table in {args.out}/glue.md; chosen runs in {args.out}/glue.json")
        if args.submission:
            print(f"glue: test predictions for gluebenchmark.com: {write_submissions(chosen, args.out)}")
    except EvaluateInterrupted as err:
        print(f"glue: {err}", file=sys.stderr)
        return err.code
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
