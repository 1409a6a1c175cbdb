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


_RESOLVERS = (("bert_exp.user_cache_dir", _user_cache_dir), ("bert_exp.required", _required),
              ("bert_exp.minilm_dir", _minilm_dir))
for _name, _resolver in _RESOLVERS:
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)
