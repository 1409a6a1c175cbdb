"""Logging handlers."""

from __future__ import annotations

import logging
import os


def is_global_rank_zero() -> bool:
    """From the variables launchers set; true when not distributed. torchrun sets RANK. Lightning's own
    launcher gives the processes it starts LOCAL_RANK (and NODE_RANK per machine); they also inherit
    the scheduler's variables (SLURM_PROCID 0 in an interactive allocation), so those count only after.
    srun sets SLURM_PROCID, LSF's jsrun JSM_NAMESPACE_RANK."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"]) == 0
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"]) == 0 and int(os.environ.get("NODE_RANK", 0)) == 0
    for name in ("SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if name in os.environ:
            return int(os.environ[name]) == 0
    return int(os.environ.get("NODE_RANK", 0)) == 0


class RankZeroFileHandler(logging.FileHandler):
    """Hydra's job log file, written by global rank 0 only.

    Under DDP every process re-runs the command in the run directory; without this each would add a
    log of its own (``train_ddp_process_1.log``, ...). Other ranks never open the file."""

    def __init__(self, filename, mode: str = "a", encoding: str | None = None, delay: bool = False,
                 errors: str | None = None):
        self.enabled = is_global_rank_zero()
        super().__init__(filename, mode, encoding, delay=delay or not self.enabled, errors=errors)

    def emit(self, record: logging.LogRecord) -> None:
        if self.enabled:
            super().emit(record)
