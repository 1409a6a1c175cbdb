"""OmegaConf resolvers used by the config tree."""

from __future__ import annotations

from omegaconf import OmegaConf
from platformdirs import user_cache_dir


def _user_cache_dir() -> str:
    return user_cache_dir("bert_exp", appauthor=False)


def _required(key: str, what: str = "a value") -> None:
    """``${bert_exp.required:task.init_from,a run directory}`` marks a value a preset requires (``???``
    cannot: a merge keeps the earlier value). It fails, naming the key, until the user sets it."""
    from .config import ConfigError

    raise ConfigError(f"{key}: required value is missing: give {what}, e.g. {key}=...")


for _name, _resolver in (("bert_exp.user_cache_dir", _user_cache_dir), ("bert_exp.required", _required)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)
