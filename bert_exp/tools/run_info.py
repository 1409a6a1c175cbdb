"""A run's record as the tools read it: ``run.json``, and a job's label among other jobs.

One home for what the report (``bert_exp.tools.report``) and the runs table (``bert_exp.tools.table``)
both read, so neither imports the other for it.
"""

from __future__ import annotations

import json
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
