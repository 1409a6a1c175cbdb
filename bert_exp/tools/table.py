"""``python -m bert_exp.report --table RUN [RUN ...]``: one Markdown row per run, read from each run's
``run.json``, the table of a results page rebuilt from the run directories it came from.

A column is a dotted path into ``run.json`` (``global_step``, ``throughput.tokens_per_sec``,
``data_report.unigram_entropy``, ``host.precision.chosen``) or a metric's name (``val/mlm_loss``: read
from ``metrics``). Each row is labelled with the overrides that differ between the runs, so a table of
probes shows what each changed.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .run_info import job_labels, read_info

DEFAULT_COLUMNS = ("global_step", "throughput.tokens_per_sec")


def value_at(info: dict, column: str):
    """The value a column names in a run record; None where the run has none."""
    if "/" in column:  # a metric's name: metrics hold them flat, slashes and all
        return (info.get("metrics") or {}).get(column)
    value = info
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def runs_table(run_dirs: list[Path], columns: list[str] | None = None) -> str:
    columns = list(columns or [])
    infos = []
    for run_dir in run_dirs:
        info = read_info(Path(run_dir))
        if not info:
            raise UserError(f"{run_dir}: no run.json (a table reads finished or running runs)")
        infos.append(info)
    if not columns:
        monitors = [info.get("monitor") for info in infos if info.get("monitor")]
        columns = [*DEFAULT_COLUMNS, *dict.fromkeys(monitors)]
    lines = ["| run | overrides | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for run_dir, info, label in zip(run_dirs, infos, job_labels(infos)):
        cells = [_cell(value_at(info, c)) for c in columns]
        lines.append(f"| {Path(run_dir).name} | {('`' + label + '`') if label else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
