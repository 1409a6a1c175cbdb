"""Checks that run before Hydra writes anything: a Hydra callback whose ``on_run_start`` comes before Hydra
creates the run directory, configures the job's log file and saves ``.hydra/``.

So a config error leaves no directory behind, and a run refused for a directory that another run holds
(or held) touches none of that run's files."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from ..errors import UserError
from .ranks import is_global_rank_zero

MIN_FREE_BYTES = 1 << 20  # below this the disk counts as full: a checkpoint or run.json would not fit


def _fail(err: Exception) -> None:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2)


def check_free_space(run_dir: Path) -> None:
    from .validation import ConfigError

    probe = run_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise ConfigError(f"the disk of hydra.run.dir={run_dir} is full ({free} bytes free); free some space "
                          "or choose another paths.output_dir")


def check_run(config: DictConfig) -> None:
    """Validates the job's config and takes the run directory's lock, before Hydra writes there.
    Raises ConfigError (nothing written) when the config or the directory cannot be used."""
    from .run_dir import RunLock, check_fresh_run_dir, lock_is_live, read_lock
    from .validation import ConfigError

    with read_write(config), open_dict(config):
        # the directory fixed once (``now`` evaluated here), so Hydra uses the one checked
        run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute()
        config.hydra.run.dir = str(run_dir)
        config.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(config)
    pipeline = "pipeline" in config
    if not pipeline:
        from .placement import check_combination, resolve_precision
        from .validation import validate_config

        job_cfg = copy.deepcopy(config)
        with read_write(job_cfg), open_dict(job_cfg):
            del job_cfg["hydra"]
        with read_write(job_cfg):
            resolve_precision(job_cfg)  # the run resolves (and logs) it again
        validate_config(job_cfg)
        check_combination(job_cfg)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"hydra.run.dir={run_dir} is a file, not a directory")
    holder = read_lock(run_dir)
    if lock_is_live(holder):
        raise ConfigError(f"hydra.run.dir={run_dir} is in use by a running process (pid {holder.get('pid')} on "
                          f"{holder.get('host')}); choose another directory, or wait for it")
    if not pipeline and not config.get("resume_in_place"):
        check_fresh_run_dir(run_dir)
    check_free_space(run_dir)
    RunLock.acquire(run_dir)


class RunGuard(Callback):
    """Registered in conf/config.yaml (hydra.callbacks.run_guard)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if not is_global_rank_zero():  # DDP's other processes run in the directory rank 0 holds
            return
        try:
            check_run(config)
        except UserError as err:
            _fail(err)
