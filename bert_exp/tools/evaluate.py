"""``python -m bert_exp.evaluate SOURCE [SOURCE ...] [--seeds 3] [--tasks sst2 cola squad pos [squad_v2]] [--out DIR]``:
the downstream suite. Every source is fine-tuned on each task with that task's fixed recipe
(``conf/experiment/suite_<task>.yaml``) and several seeds; one table (Markdown, CSV and a PNG) gives each
source's mean ± standard deviation per task and an average score.

A SOURCE is a run directory, a ``.ckpt``, an exported or HuggingFace directory, or ``scratch:PATH``: the
shape and vocabulary of PATH with random weights, what pre-training is measured against. ``NAME=SOURCE``
names its row. Every job is a ``python -m bert_exp`` of its own in ``OUT/<row>/<task>/seed<S>``; running
the same command again skips the jobs that finished and continues an interrupted one.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..records import write_json
from ..runner.children import INTERRUPTED, run_child
from ..runner.run_dir import finished_job, read_run_info
from ..runner.validation import ConfigError

# task -> (metric in run.json, its name in the table, scale to points)
TASKS = {
    "sst2": ("val/acc", "SST-2 acc", 100.0),
    "cola": ("val/mcc", "CoLA MCC", 100.0),
    "squad": ("val/f1", "SQuAD-local F1", 1.0),
    "squad_v2": ("val/f1", "SQuAD2-local F1", 1.0),  # at the threshold tuned on held-out training articles
    "pos": ("val/test/accuracy", "UD POS test acc", 100.0),  # ParTUT has a test set: scored there, not on dev
}
DEFAULT_TASKS = ("sst2", "cola", "squad", "pos")


class EvaluateError(UserError, ValueError):
    pass


class EvaluateInterrupted(EvaluateError):
    """A job stopped by a signal: the suite stops with the job's own exit code (130, 143)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class Source:
    label: str
    overrides: list[str]
    path: str


def vocab_of(path: Path, out: Path) -> Path:
    """The vocabulary file of a run directory, exported directory or .ckpt (written out for a .ckpt):
    ``vocab.txt``, or ``tokenizer.json`` for a byte-level BPE (which has no vocab.txt)."""
    folder = path.parent.parent if path.suffix == ".ckpt" else path
    for candidate in (folder / "vocab.txt", folder / "tokenizer.json"):
        if candidate.is_file():
            return candidate
    from ..tasks.checkpoints import load_checkpoint

    ckpt = load_checkpoint(path)
    if not ckpt.vocab:
        raise EvaluateError(f"{path}: no vocabulary to train a scratch model with")
    out.mkdir(parents=True, exist_ok=True)
    if ckpt.tokenizer:
        target = out / "tokenizer.json"
        target.write_text(ckpt.tokenizer, encoding="utf-8")
        return target
    target = out / "vocab.txt"
    target.write_text("\n".join(ckpt.vocab) + "\n", encoding="utf-8")
    return target


def source_path(text: str, spec: str):
    """The local path of a source (a Hub model fetched first: ``hf:NAME[@REVISION]``) and its Hub record."""
    from ..errors import CheckpointError
    from ..model.hub import local_source

    try:
        path, hub = local_source(spec)
    except CheckpointError as exc:
        raise EvaluateError(f"{text}: {exc}") from None
    path = path.resolve()
    if not path.exists():
        raise EvaluateError(f"{text}: {path} does not exist (a run directory, .ckpt, exported or HuggingFace "
                            "directory, a Hub model hf:NAME, or scratch:PATH)")
    return path, hub


def parse_source(text: str, out: Path) -> Source:
    label, _, spec = text.rpartition("=") if "=" in text else ("", "", text)
    if spec.startswith("scratch:"):
        path, hub = source_path(text, spec.removeprefix("scratch:"))
        label = label or f"scratch-{hub.repo_id.rsplit('/', 1)[-1] if hub else path.name}"
        vocab = vocab_of(path, out / label)
        return Source(label, ["task.init_from=null", f"model.source={path}", f"data.vocab_file={vocab}"], spec)
    path, hub = source_path(text, spec)
    if hub is not None:  # every job starts from the commit fetched now, and records it
        return Source(label or hub.repo_id.rsplit("/", 1)[-1], [f"task.init_from=hf:{hub.repo_id}@{hub.commit}"], spec)
    return Source(label or path.name, [f"task.init_from={path}"], spec)


def job_overrides(source: Source, task: str, seed: int, extra: list[str]) -> list[str]:
    """A job's overrides, as its run.json records them (the run directory is not one)."""
    return [f"+experiment=suite_{task}", *source.overrides, f"seed={seed}", "resume_in_place=true", "logger=csv",
            *extra]


def run_job(job_dir: Path, overrides: list[str], label: str, dry_run: bool = False) -> dict | None:
    """One ``python -m bert_exp`` job in ``job_dir``: its run.json, read when it finished earlier, else run
    (None with ``dry_run``: the command is only printed). Another job's directory, a stopped job and a
    failed one are one line each; running the same command again continues an interrupted job."""
    command = [sys.executable, "-m", "bert_exp", *overrides, f"hydra.run.dir={job_dir}"]
    try:  # a directory holding another job (other overrides, a changed source) is refused
        info = finished_job(job_dir, overrides)
    except ConfigError as err:
        raise EvaluateError(f"{err} (another --out keeps both)") from None
    if info is not None:
        return info
    job = label.partition(": ")[2]  # "evaluate: sst2 seed 42" -> the job's own words
    print(f"{label}: {' '.join(command[1:])}", flush=True)
    if dry_run:
        return None
    code = run_child(command)
    info = read_run_info(job_dir)
    if code in INTERRUPTED:
        raise EvaluateInterrupted(code, f"{job} was stopped (exit code {code}), its last.ckpt in {job_dir}. Run the "
                                  "same command again to continue it")
    if code != 0 or not info:
        raise EvaluateError(f"{job} failed (exit code {code}); see {job_dir}. Run the same command again: "
                            "finished jobs are skipped")
    return info


def run_suite(sources: list[Source], tasks: list[str], seeds: list[int], out: Path, extra: list[str],
              dry_run: bool = False) -> dict:
    """Runs (or, finished earlier, reads) every job; returns {label: {task: [values]}}."""
    results: dict[str, dict[str, list[float]]] = {}
    for source in sources:
        for task in tasks:
            metric, _, scale = TASKS[task]
            for seed in seeds:
                job_dir = out / source.label / task / f"seed{seed}"
                overrides = job_overrides(source, task, seed, extra)
                info = run_job(job_dir, overrides, f"evaluate: {source.label} {task} seed {seed}", dry_run)
                if info is None:
                    continue
                value = (info.get("metrics") or {}).get(metric)
                if value is None:
                    reason = "null: it was not finite" if metric in (info.get("metrics") or {}) else "missing"
                    raise EvaluateError(f"{job_dir}/run.json: {metric} is {reason}")
                results.setdefault(source.label, {}).setdefault(task, []).append(float(value) * scale)
    return results


def summarize(results: dict, tasks: list[str]) -> list[dict]:
    """One row per source: mean and standard deviation per task (in points), and the average of the means."""
    rows = []
    for label, by_task in results.items():
        row: dict = {"source": label}
        means = []
        for task in tasks:
            values = by_task.get(task, [])
            if not values:
                continue
            mean = statistics.fmean(values)
            row[task] = {"mean": mean, "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                         "n": len(values), "values": values}
            means.append(mean)
        row["average"] = statistics.fmean(means) if means else None
        rows.append(row)
    return rows


def markdown_table(rows: list[dict], tasks: list[str]) -> str:
    header = ["source", *(TASKS[t][1] for t in tasks), "average"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["source"]]
        for task in tasks:
            cell = row.get(task)
            cells.append(f"{cell['mean']:.1f} ± {cell['std']:.1f} (n={cell['n']})" if cell else "-")
        cells.append(f"{row['average']:.1f}" if row["average"] is not None else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(rows: list[dict], tasks: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.md").write_text(markdown_table(rows, tasks))
    with open(out / "suite.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["source", *(f"{t}_{k}" for t in tasks for k in ("mean", "std", "n")), "average"])
        for row in rows:
            writer.writerow([row["source"], *(row[t][k] if t in row else "" for t in tasks for k in ("mean", "std", "n")),
                             row["average"]])
    write_json(out / "suite.json", {"tasks": tasks, "rows": rows}, indent=2)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(tasks), 3.6))
    width = 0.8 / max(len(rows), 1)
    for i, row in enumerate(rows):
        xs = [j + i * width for j, t in enumerate(tasks) if t in row]
        ax.bar(xs, [row[t]["mean"] for t in tasks if t in row], width, yerr=[row[t]["std"] for t in tasks if t in row],
               capsize=3, label=row["source"])
    ax.set_xticks([j + width * (len(rows) - 1) / 2 for j in range(len(tasks))], [TASKS[t][1] for t in tasks])
    ax.set_ylabel("points (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "suite.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="run dir, .ckpt, exported/HF dir, scratch:PATH; NAME=SOURCE names the row")
    parser.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per task (default 3)")
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), choices=list(TASKS))
    parser.add_argument("--out", type=Path, default=Path("outputs/evaluate"))
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every job (e.g. hardware=gpu)")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs that would run")
    args = parser.parse_args(argv)
    try:
        if args.seeds < 1:
            raise EvaluateError("--seeds must be at least 1")
        sources = [parse_source(s, args.out) for s in args.sources]
        labels = [s.label for s in sources]
        if len(set(labels)) != len(labels):
            raise EvaluateError(f"two sources share a row name ({labels}); name them NAME=SOURCE")
        if len(set(args.tasks)) != len(args.tasks):
            raise EvaluateError(f"--tasks names a task twice ({' '.join(args.tasks)})")
        for override in args.override:
            if override.lstrip("+~").partition("=")[0] == "seed":
                raise EvaluateError(f"--override {override}: the suite sets each job's seed; use --first-seed "
                                    "and --seeds")
        seeds = list(range(args.first_seed, args.first_seed + args.seeds))
        results = run_suite(sources, args.tasks, seeds, args.out, args.override, args.dry_run)
    except EvaluateInterrupted as err:
        print(f"evaluate: {err}", file=sys.stderr)
        return err.code
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    rows = summarize(results, args.tasks)
    write_outputs(rows, args.tasks, args.out)
    print(markdown_table(rows, args.tasks), end="")
    print(f"evaluate: table in {args.out}/suite.md, suite.csv and suite.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
