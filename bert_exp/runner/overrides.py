"""An override of a key the config does not have, typed without ``+`` (``logger.wandb.projct=x``): Hydra
refuses it in seven lines of its own; here it gets the answer the same key typed with ``+`` gets from
:mod:`.validation`, one line with the nearest key, exit code 2."""

from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf

from .validation import ConfigError, invalid_config, target_parameters, unknown_key

# Hydra's words (hydra/_internal/config_loader_impl.py) for an override of a key the config lacks
_REFUSED = re.compile(r"^Could not override '(?P<key>[^']+)'\.\s+To append to your config use \+")


def refused_key(err: BaseException) -> str | None:
    """The key, when ``err`` is Hydra refusing an override of a key the config lacks."""
    match = _REFUSED.match(str(err).strip())
    return match["key"] if match else None


def _overrides(args: list[str]) -> list[str]:
    """The overrides among the command's arguments (flags and their values left out), a sweep's first job's."""
    from .command_line import _strip_cfg, expand

    overrides = [a for a in _strip_cfg(args)[0] if not a.startswith("-")]
    return expand(overrides)[0] if overrides else []


def _compose(overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..resources import resource_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        return compose("config", overrides=overrides, return_hydra_config=True)  # hydra.* keys are overridden too


def _problem(cfg: DictConfig, key: str) -> str:
    """``key`` is not in ``cfg``: the line naming it, as :func:`.validation.validate_config` words it."""
    parts = key.split(".")

    def node(length: int):  # the node of the key's first ``length`` parts
        return OmegaConf.select(cfg, ".".join(parts[:length]), default=None, throw_on_resolution_failure=False)

    depth = 0  # how many of its parts the config has
    while depth < len(parts) - 1 and node(depth + 1) is not None:
        depth += 1
    parent = node(depth) if depth else cfg
    full = ".".join(parts[: depth + 1])
    if not isinstance(parent, DictConfig):
        return f"{full}: unknown key"
    target = parent.get("_target_") if depth == len(parts) - 1 else None
    parameters = target_parameters(target) if target else None
    if parameters is not None:  # a target's keys are its parameters (the form with + is checked so)
        if parts[-1] in parameters:  # a parameter the preset leaves at its default: Hydra adds it with +
            return f"{full}: not set by this config; a parameter of {target}, added with a leading +: +{full}=VALUE"
        return unknown_key(full, [p for p in parameters if p != "self"], target)
    return unknown_key(full, [str(k) for k in parent])


def unknown_override_error(args: list[str], err: BaseException) -> ConfigError | None:
    """For Hydra's refusal ``err`` of an override of a key the config lacks: a ConfigError naming every such
    override in ``args`` with its nearest key; None for any other error (or a config that still does not
    compose without them, whose error Hydra's own words then name)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    key = refused_key(err)
    if key is None:
        return None
    overrides, keys = _overrides(args), []
    while key is not None:
        typed = [o for o in overrides if o.partition("=")[0] == key]  # (a sweep's first value, as composed)
        if not typed:
            return None
        keys.append(key)
        overrides.remove(typed[0])
        try:
            cfg = _compose(overrides)
        except (HydraException, OmegaConfBaseException) as again:
            key = refused_key(again)
        else:
            return invalid_config([_problem(cfg, name) for name in keys])
    return None


def unreadable_override_error(err: BaseException) -> str | None:
    """Hydra's refusal of an override its grammar cannot read (``key={'a':0}``), as one line naming it."""
    from hydra.errors import OverrideParseException

    if not isinstance(err, OverrideParseException):
        return None
    reason = str(err).splitlines()[0].strip() if str(err).strip() else "unreadable"
    return (f"{err.override}: Hydra's override grammar cannot read it ({reason}; "
            "https://hydra.cc/docs/advanced/override_grammar/basic)")
