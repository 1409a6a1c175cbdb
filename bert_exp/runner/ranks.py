"""Which process of a distributed run this is, from the launcher's variables."""

from __future__ import annotations

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
