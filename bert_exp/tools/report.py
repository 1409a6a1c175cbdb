"""``python -m bert_exp.report RUN_OR_SWEEP_DIR``: PNG plots and a Markdown summary, offline, from the
run logs (``logs/metrics.csv``, ``run.json``), written to ``DIR/report/``.

- a run: its training and validation curves, and its final metrics;
- a sweep (a directory of job directories): the summary table, the monitored metric against each swept
  parameter, and every job's validation curve;
- a pipeline: a report for each stage, and an index.

``--table RUN [RUN ...]`` prints one Markdown table of the runs instead (``bert_exp.tools.table``): the
tables of ``docs/results/`` are rebuilt from their run directories this way.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from ..errors import UserError  # noqa: E402
from ..runner.run_dir import run_state  # noqa: E402
from .run_info import job_labels, read_curves, read_info  # noqa: E402
from .sweep import job_dirs, summarize, write_summary  # noqa: E402
from .glue import glue_runs_table  # noqa: E402
from .table import runs_table  # noqa: E402


def _plot(curves: dict[str, list], keys: list[str], title: str, path: Path) -> Path | None:
    keys = [k for k in keys if curves.get(k)]
    if not keys:
        return None
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.4 * len(keys)), squeeze=False, sharex=True)
    for ax, key in zip(axes[:, 0], keys):
        steps, values = zip(*curves[key])
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_report(run_dir: Path, out: Path) -> Path:
    info = read_info(run_dir)
    curves = read_curves(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_keys = sorted(k for k in curves if k.startswith("train/") or k == "lr")
    val_keys = sorted(k for k in curves if k.startswith("val/"))
    images = [p for p in (_plot(curves, train_keys, f"{info.get('experiment', run_dir.name)}: training", out / "train.png"),
                          _plot(curves, val_keys, f"{info.get('experiment', run_dir.name)}: validation", out / "val.png"))
              if p is not None]
    lines = [f"# {info.get('experiment', run_dir.name)} ({info.get('task', '?')})", "",
             f"- run directory: `{run_dir}`", f"- status: {run_state(run_dir, info) if info else '?'}, step {info.get('global_step', '?')}",
             f"- monitored: {info.get('monitor')} = {_fmt((info.get('metrics') or {}).get(info.get('monitor')))}"]
    if info.get("throughput", {}).get("tokens_per_sec"):
        lines.append(f"- throughput: {info['throughput']['tokens_per_sec']:.0f} tokens/s")
    if info.get("overrides"):
        lines.append(f"- overrides: `{' '.join(info['overrides'])}`")
    if info.get("error"):
        lines.append(f"- error: {info['error'].get('type')}: {info['error'].get('message')}")
    lines += ["", "| metric | final |", "|---|---|"]
    lines += [f"| {k} | {_fmt(v)} |" for k, v in sorted((info.get("metrics") or {}).items())]
    lines += ["", *(f"![{p.stem}]({p.name})" for p in images)]
    markdown = out / "report.md"
    markdown.write_text("\n".join(lines) + "\n")
    return markdown


def _numeric(value: str):
    try:
        return float(value)
    except ValueError:
        return value


def sweep_report(sweep_dir: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    directories, runs, skipped = [], [], []
    for directory in job_dirs(sweep_dir):  # a damaged job is named and left out; the others are drawn
        try:
            info = read_info(directory)
            read_curves(directory)
        except UserError as err:
            skipped.append(str(err))
            print(f"skipping {directory}: {err}", file=sys.stderr)
            continue
        info["status"] = run_state(directory, info)
        directories.append(directory)
        runs.append(info)
    if not runs:
        raise UserError(f"{sweep_dir}: no job with a readable run.json and logs/metrics.csv")
    swept, rows = summarize(runs)
    write_summary(sweep_dir)
    monitor = rows[0]["monitor"]
    images = []
    for key in swept:  # the metric of every finished job against this parameter, mean per value
        fig, ax = plt.subplots(figsize=(6, 3.5))
        points = [(_numeric(row[key]), value) for row in rows for value in row["values"]]
        means = sorted((_numeric(row[key]), row["mean"]) for row in rows if row["mean"] is not None)
        if points:
            ax.scatter(*zip(*points), alpha=0.6, label="jobs")
        if means:
            ax.plot(*zip(*means), color="black", marker="s", label="mean")
        if means and all(isinstance(x, float) and x > 0 for x, _ in means) and max(x for x, _ in means) / min(x for x, _ in means) > 10:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(monitor)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / f"sweep_{key.replace('/', '_')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        images.append(path)
    fig, ax = plt.subplots(figsize=(7, 4))  # every job's validation curve of the monitored metric
    for job_dir, label in zip(directories, job_labels(runs)):
        try:
            curve = read_curves(job_dir).get(monitor)
        except UserError:
            continue
        if curve:
            ax.plot(*zip(*curve), marker="o", markersize=3, label=f"{job_dir.name}: {label}" if label else job_dir.name)
    ax.set_xlabel("step")
    ax.set_ylabel(monitor)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "val_curves.png", dpi=100)
    plt.close(fig)
    images.append(out / "val_curves.png")
    lines = [(sweep_dir / "summary.md").read_text(), *(f"![{p.stem}]({p.name})" for p in images)]
    if skipped:
        lines += ["", "Left out (damaged):", *(f"- {s}" for s in skipped)]
    markdown = out / "report.md"
    markdown.write_text("\n".join(lines) + "\n")
    return markdown


def pipeline_report(run_dir: Path, out: Path) -> Path:
    stages = json.loads((run_dir / "pipeline.json").read_text())
    lines = [f"# Pipeline {run_dir}", "", "| stage | status | monitored | value |", "|---|---|---|---|"]
    for name, stage in stages.items():
        stage_dir = Path(stage["run_dir"])
        if (stage_dir / "logs" / "metrics.csv").is_file():
            try:
                run_report(stage_dir, stage_dir / "report")
                name = f"[{name}]({Path('..', name, 'report', 'report.md')})"
            except UserError as err:
                print(f"skipping {stage_dir}: {err}", file=sys.stderr)
        lines.append(f"| {name} | {stage['status']} | {stage['monitor']} | {_fmt(stage['value'])} |")
    out.mkdir(parents=True, exist_ok=True)
    markdown = out / "report.md"
    markdown.write_text("\n".join(lines) + "\n")
    return markdown


def report(directory: Path) -> Path:
    directory = Path(directory)
    out = directory / "report"
    if (directory / "pipeline.json").is_file():
        return pipeline_report(directory, out)
    if (directory / "run.json").is_file() or (directory / "logs" / "metrics.csv").is_file():
        return run_report(directory, out)
    if any(directory.glob("*/run.json")):
        return sweep_report(directory, out)
    raise UserError(f"{directory}: neither a run directory (run.json), a sweep directory (*/run.json) nor a "
                    "pipeline (pipeline.json)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, nargs="+",
                        help="a run, sweep or pipeline directory (with --table: one or more runs)")
    parser.add_argument("--table", action="store_true",
                        help="print one Markdown table of the given runs, a row each, instead of a report")
    parser.add_argument("--columns", default="",
                        help="with --table: comma-separated run.json paths (global_step, "
                             "throughput.tokens_per_sec, data_report.unigram_entropy) or metric names "
                             "(val/mlm_loss); default: step, tokens/s and the monitored metric")
    parser.add_argument("--glue", action="store_true",
                        help="with --table: GLUE's table (BERT's Table 1) of fine-tuning runs, or of the job "
                             "directories under python -m bert_exp.glue's --out, the best run per task on dev")
    parser.add_argument("--output", type=Path, help="with --table: also write the table to this file")
    args = parser.parse_args(argv)
    if args.glue and not args.table:
        parser.error("--glue goes with --table")
    if args.table:
        try:
            table = (glue_runs_table(args.directory) if args.glue
                     else runs_table(args.directory, [c for c in args.columns.split(",") if c]))
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(table, end="")
        if args.output:
            args.output.write_text(table)
        return 0
    if len(args.directory) > 1:
        parser.error("one directory at a time (several runs make a table: --table)")
    try:
        markdown = report(args.directory[0])
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"report: {markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
