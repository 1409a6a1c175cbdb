"""What the first process of a multi-process run works out once and hands to the others: the vocabulary
trained on the corpus and the input files' sha256 (:meth:`PretrainingDataModule.shared_state`).

Without it every process would hash every input and train a vocabulary of its own, and on machines with
caches of their own each node would tokenize with its own. The run directory is the one place every
process of a run shares (across machines it must be on a shared file system, as ``hydra.run.dir``
already must), so the first process writes ``RUN/.shared/data.json`` and the others wait for it. A stale
file of an earlier attempt in the same directory holds the same config (a directory refuses other
overrides), and the ranks' vocabularies and data are compared again before the first step
(``PretrainingDataModule._check_ranks_agree``), which stops a run whose ranks disagree.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from ..errors import UserError
from ..records import write_json
from ..waiting import wait_for
from .ranks import is_global_rank_zero

log = logging.getLogger(__name__)

SHARED = Path(".shared") / "data.json"


def clear_handoff(run_dir: Path) -> None:
    """The first process, before anything: an earlier attempt's hand-off goes."""
    shutil.rmtree(Path(run_dir) / SHARED.parent, ignore_errors=True)


def share_data_state(datamodule, run_dir: Path) -> None:
    """The first process publishes the DataModule's shared state; the others wait for it and use it."""
    path = Path(run_dir) / SHARED
    if is_global_rank_zero():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, datamodule.shared_state())
        return
    settings = getattr(datamodule, "prepare_settings", None)
    minutes = settings.wait_minutes if settings is not None else 120
    wait_for(path.exists, f"the run's first process to train the vocabulary and hash the inputs ({path})",
             minutes * 60, check=lambda: _stop_if_first_failed(Path(run_dir)))
    datamodule.use_shared_state(json.loads(path.read_text(encoding="utf-8")))


def _stop_if_first_failed(run_dir: Path) -> None:
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if info.get("status") == "failed":
        message = (info.get("error") or {}).get("message", "")
        raise UserError(f"the run's first process failed before it shared the vocabulary: {message} "
                        f"(see {run_dir / 'bert_exp.log'})")
