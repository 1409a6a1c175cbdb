"""OmegaConf resolvers used by the config tree."""

from __future__ import annotations

from omegaconf import OmegaConf
from platformdirs import user_cache_dir


def _user_cache_dir() -> str:
    return user_cache_dir("bert_exp", appauthor=False)


def _required(key: str, what: str = "a value") -> None:
    """``${bert_exp.required:task.init_from,a run directory}`` marks a value a preset requires (``???``
    cannot: a merge keeps the earlier value). It fails, naming the key, until the user sets it."""
    from .validation import ConfigError

    raise ConfigError(f"{key}: required value is missing: give {what}, e.g. {key}=...")


def _minilm_dir() -> str:
    from ..resources import minilm_dir

    return str(minilm_dir())


def _wandb_group(experiment: str) -> str:
    """A run's W&B group is its experiment; the jobs of one sweep get a group of their own (a Hydra
    multirun: EXPERIMENT-SWEEPDIR; a W&B sweep's agent: EXPERIMENT-SWEEPID), so two sweeps of one preset
    stay apart on the dashboard."""
    import os
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if os.environ.get("WANDB_SWEEP_ID"):
        return f"{experiment}-{os.environ['WANDB_SWEEP_ID']}"
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return f"{experiment}-{Path(HydraConfig.get().sweep.dir).name}"
    return experiment


_RESOLVERS = (("bert_exp.user_cache_dir", _user_cache_dir), ("bert_exp.required", _required),
              ("bert_exp.minilm_dir", _minilm_dir), ("bert_exp.wandb_group", _wandb_group))
for _name, _resolver in _RESOLVERS:
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)
