"""A run's directory over its life: fresh, resumed in place (a re-run sweep job), or already finished.

``run.json`` is written when a run starts (status ``running``) and again when it ends, so even a
killed run leaves its config, overrides and W&B run id behind.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import open_dict, read_write

from .validation import ConfigError

log = logging.getLogger(__name__)


def hydra_overrides() -> list[str]:
    """The command-line overrides of this job (a sweep's job: its own values), [] without Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def read_run_info(run_dir: Path) -> dict | None:
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def original_run_info(ckpt_path: Path | None) -> dict | None:
    """run.json of the run a checkpoint came from (``RUN/checkpoints/x.ckpt``)."""
    if ckpt_path is None:
        return None
    return read_run_info(ckpt_path.parent.parent)


def check_fresh_run_dir(run_dir: Path) -> None:
    """Runs never overwrite each other's outputs."""
    for name in ("run.json", "checkpoints"):
        if (run_dir / name).exists():
            raise ConfigError(
                f"hydra.run.dir={run_dir} already holds a run ({name}); runs never overwrite each other. "
                f"Choose another directory; to continue that run, start a new one with ckpt_path={run_dir}"
            )


@dataclass
class JobDirectory:
    """What to do in the directory of a sweep job or pipeline stage that is run again."""

    finished: dict | None = None  # run.json of a finished job: skip it
    resume_from: Path | None = None  # last.ckpt of an interrupted job: continue it in place
    previous: dict | None = None
    # filled in by the runner when it opens the job
    run_dir: Path | None = None
    overrides: list[str] | None = None
    ckpt_path: Path | None = None  # what the run resumes from: ckpt_path= or resume_from
    wandb_id: str | None = None

    @classmethod
    def inspect(cls, run_dir: Path, overrides: list[str], in_place: bool) -> JobDirectory:
        """``in_place``: a sweep job or pipeline stage, whose directory a re-run reuses."""
        previous = read_run_info(run_dir)
        if not in_place or (previous is None and not (run_dir / "checkpoints").exists()):
            check_fresh_run_dir(run_dir)
            return cls()
        if previous is not None and previous.get("overrides") != overrides:
            raise ConfigError(
                f"{run_dir} holds another job (overrides {previous.get('overrides')}, not {overrides}); "
                "re-run with the same arguments, or choose a new directory"
            )
        if previous is not None and previous.get("status") == "finished":
            return cls(finished=previous, previous=previous)
        last = run_dir / "checkpoints" / "last.ckpt"
        return cls(resume_from=last if last.is_file() else None, previous=previous)


def prepare_ddp_children(run_dir: Path, ckpt_path: Path | None, world_size: int) -> None:
    """Makes Lightning's DDP launcher start this run's other processes as the same run.

    Lightning re-runs ``sys.argv`` with ``hydra.run.dir`` set to Hydra's run directory. In a sweep that
    command is the whole sweep and that directory not the job's: the command becomes the job's own
    overrides and the directory the job's. A run resumed in place passes its checkpoint on too."""
    from hydra.core.hydra_config import HydraConfig

    if world_size == 1:
        return
    if is_multirun():
        args = [a for a in HydraConfig.get().overrides.task if not a.startswith("ckpt_path=")]
        sys.argv = [sys.argv[0], *args]
        hydra_cfg = HydraConfig.get()
        with read_write(hydra_cfg), open_dict(hydra_cfg):
            hydra_cfg.run.dir = str(run_dir)
    if ckpt_path is not None and not any(a.startswith("ckpt_path=") for a in sys.argv[1:]):
        sys.argv.append(f"ckpt_path={ckpt_path}")


# what Lightning's DDP launcher sets in the launching process's environment (OMP_NUM_THREADS: with
# torch's thread count, shared out among a CPU machine's processes)
LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS")


@contextmanager
def sweep_job_environment():
    """A multirun runs its jobs one after another in one process. Lightning's DDP launcher leaves
    LOCAL_RANK & co. in that process's environment, the process group open and, on CPU, torch's thread
    count cut; the next job would take its processes for launched already and wait for them, or run on
    fewer threads. Each job gets the environment and thread count it started with, and no process group."""
    if not is_multirun():
        yield
        return
    import torch

    saved = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_num_threads(threads)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
