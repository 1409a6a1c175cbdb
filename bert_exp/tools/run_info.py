"""A run's record as the tools read it: ``run.json``, and a job's label among other jobs.

One home for what the report (``bert_exp.tools.report``) and the runs table (``bert_exp.tools.table``)
both read, so neither imports the other for it; and its CSV log's curves (the report's and GLUE's table's).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from ..errors import UserError


def read_info(run_dir: Path) -> dict:
    """run.json ({} when absent); UserError naming the file when it is not JSON."""
    path = run_dir / "run.json"
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(info, dict):
        raise UserError(f"{path}: not a run record (a JSON object)")
    return info


def job_labels(runs: list[dict]) -> list[str]:
    """Each job's overrides that differ between jobs (seed included), e.g. ``optim.optimizer.lr=1e-3 seed=2``."""
    overrides = [[o for o in run.get("overrides", []) if not o.startswith("hydra.")] for run in runs]
    varying = {o for job in overrides for o in job if sum(o in other for other in overrides) < len(overrides)}
    return [" ".join(o for o in job if o in varying) for job in overrides]


def read_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] from the CSV logger; a step logged twice (a run resumed in place
    repeats the steps after its last checkpoint) keeps its last value."""
    path = run_dir / "logs" / "metrics.csv"
    if not path.is_file():
        raise UserError(f"{path} does not exist: the report reads the CSV logger's file (logger=default or csv)")
    curves: dict[str, dict[int, float]] = defaultdict(dict)
    line = 1
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for row in reader:
                line = reader.line_num
                step = int(row["step"])
                for key, value in row.items():
                    if key not in ("step", "epoch") and value not in ("", None):
                        curves[key][step] = float(value)
    except (ValueError, KeyError, TypeError, csv.Error, UnicodeDecodeError) as err:
        raise UserError(f"{path}, line {line}: not a metrics file the CSV logger wrote ({type(err).__name__}: "
                        f"{err})") from None
    return {key: sorted(points.items()) for key, points in curves.items()}
