"""Sweeps: the summary table of a sweep directory, and the W&B sweep spec of a ready-made sweep.

``SweepSummary`` is a Hydra callback: when a multirun ends, it reads each job's ``run.json`` and
writes ``summary.md`` and ``summary.csv`` to the sweep directory (overrides -> monitored metric,
mean and median over seeds). ``python -m bert_exp.sweep wandb NAME +experiment=...`` prints the
same sweep as a W&B sweep spec whose agent runs ``python -m bert_exp`` with Hydra overrides.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml
from omegaconf import OmegaConf
from hydra.experimental.callback import Callback

SEED_KEYS = ("seed",)


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The directories of a sweep's jobs that wrote a run.json, in job order (2 before 10)."""
    return sorted((p.parent for p in Path(sweep_dir).glob("*/run.json")), key=lambda d: (len(d.name), d.name))


def job_runs(sweep_dir: Path) -> list[dict]:
    """run.json of every job under a sweep directory, in job order."""
    runs = []
    for directory in job_dirs(sweep_dir):
        try:
            runs.append(json.loads((directory / "run.json").read_text()))
        except json.JSONDecodeError:
            continue
    return runs


def _key_value(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def summarize(runs: list[dict]) -> tuple[list[str], list[dict]]:
    """Groups jobs by their overrides other than the seed and the run directory; each row holds the
    monitored metric's values over seeds, their mean and median. Keys that all jobs share are left out."""
    if not runs:
        return [], []
    overrides = [dict(_key_value(o) for o in run.get("overrides", [])
                      if not _key_value(o)[0].startswith("hydra.")) for run in runs]
    keys = sorted({k for o in overrides for k in o})
    swept = [k for k in keys if k not in SEED_KEYS and len({o.get(k) for o in overrides}) > 1]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run, values in zip(runs, overrides):
        groups[tuple(values.get(k, "") for k in swept)].append(run)
    rows = []
    for group_key, members in groups.items():
        monitor = members[0].get("monitor")
        scores = [m["metrics"].get(monitor) for m in members
                  if m.get("status") == "finished" and m.get("metrics", {}).get(monitor) is not None]
        rows.append({
            **dict(zip(swept, group_key)),
            "monitor": monitor,
            "jobs": len(members),
            "finished": len(scores),
            "mean": statistics.fmean(scores) if scores else None,
            "median": statistics.median(scores) if scores else None,
            "values": scores,
        })
    return swept, rows


def _fmt(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def write_summary(sweep_dir: Path) -> Path | None:
    """Writes summary.md and summary.csv to the sweep directory; returns the Markdown file."""
    sweep_dir = Path(sweep_dir)
    swept, rows = summarize(job_runs(sweep_dir))
    if not rows:
        return None
    columns = [*swept, "monitor", "jobs", "finished", "mean", "median", "values"]
    lines = [f"# Sweep {sweep_dir}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [", ".join(_fmt(v) for v in row[c]) if c == "values" else _fmt(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    markdown = sweep_dir / "summary.md"
    markdown.write_text("\n".join(lines) + "\n")
    with open(sweep_dir / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({**row, "values": " ".join(map(str, row["values"]))} for row in rows)
    return markdown


class SweepSummary(Callback):
    """Hydra callback: writes the sweep's summary table when a multirun ends."""

    def on_multirun_end(self, config, **kwargs) -> None:
        markdown = write_summary(Path(config.hydra.sweep.dir))
        if markdown is not None:
            print(markdown.read_text())
            print(f"sweep summary: {markdown}")


# -- W&B sweep specs ----------------------------------------------------------------------------


def wandb_spec(overrides: list[str]) -> dict:
    """The W&B sweep spec of a composed sweep (e.g. ``["+experiment=cola_base", "+sweeps=cola_paper_grid"]``):
    the same parameters, the task's monitored metric, and an agent command running our CLI."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..runner import resolvers  # noqa: F401
    from ..resources import resource_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    params = dict(cfg.hydra.sweeper.get("params") or {})
    if not params:
        raise SystemExit("error: the composed config has no hydra.sweeper.params (add +sweeps=NAME)")
    parser = OverridesParser.create()
    parameters, grid = {}, True
    for key, expression in params.items():
        override = parser.parse_override(f"{key}={expression}")
        if override.is_discrete_sweep():  # a,b,c / choice(...) / range(...)
            parameters[key] = {"values": list(override.sweep_iterator())}
        elif override.is_interval_sweep():
            interval = override.value()
            log = "log" in interval.tags
            parameters[key] = {"min": interval.start, "max": interval.end,
                               "distribution": "log_uniform_values" if log else "uniform"}
            grid = False
        else:
            parameters[key] = {"value": override.value()}
    fixed = [o for o in overrides if not o.startswith(("+sweeps=", "sweeps="))]
    wandb = OmegaConf.select(cfg, "logger.wandb")
    if wandb is None:
        raise SystemExit("error: a W&B sweep logs to W&B: keep the default logger (or logger=wandb)")
    where = {"project": wandb.project, **({"entity": wandb.entity} if wandb.entity else {})}
    return {
        **where,  # `wandb sweep` creates the sweep there; its runs log there (the command's logger.wandb)
        "method": "grid" if grid else "bayes",
        "metric": {"name": cfg.task.monitor, "goal": "maximize" if cfg.task.monitor_mode == "max" else "minimize"},
        "parameters": parameters,
        "command": ["${env}", "${interpreter}", "-m", "bert_exp", *fixed, "${args_no_hyphens}"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.sweep",
                                     description="Sweep summaries and W&B sweep specs.")
    commands = parser.add_subparsers(dest="command", required=True)
    spec = commands.add_parser("wandb", help="print a ready-made sweep as a W&B sweep spec (wandb sweep FILE)")
    spec.add_argument("name", help="a sweep under sweeps/, e.g. cola_paper_grid")
    spec.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +experiment=cola_base")
    summary = commands.add_parser("summary", help="(re)write summary.md of a sweep directory")
    summary.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "wandb":
        print(yaml.safe_dump(wandb_spec([*args.overrides, f"+sweeps={args.name}"]), sort_keys=False), end="")
    else:
        markdown = write_summary(args.sweep_dir)
        if markdown is None:
            print(f"error: no job run.json under {args.sweep_dir}", file=sys.stderr)
            return 2
        print(markdown.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
