"""Finding the config tree, and checking a composed config before any work is done.

Hydra already rejects an override of a key that does not exist. This adds the rest: a required value
left as ``???``, a key that the ``_target_`` it configures does not accept (a typo), and a value of
the wrong type for the target's annotated parameter. Each error names the full key.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from pathlib import Path

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """``conf`` or ``sweeps``: the checkout's top-level folder, else the copy packaged in the wheel."""
    for candidate in (PACKAGE_DIR.parent / name, PACKAGE_DIR / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bert_exp's {name}/ folder is neither in the checkout nor in the package")


class ConfigError(UserError, ValueError):
    """A config mistake; the message names the key."""


def _matches(value, annotation) -> bool:
    if annotation is inspect.Parameter.empty or annotation is typing.Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if value is None:
        return False
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (str, bool):
        return isinstance(value, annotation)
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (list, tuple) or annotation in (list, tuple):
        return isinstance(value, (list, tuple, ListConfig))
    if origin is dict or annotation is dict:
        return isinstance(value, (dict, DictConfig))
    if inspect.isclass(annotation):  # a config value (a primitive) cannot be, e.g., a Tensor
        return isinstance(value, annotation)
    return True  # callables, type variables...: left to the target itself


def _check_target(node: DictConfig, key: str, errors: list[str]) -> None:
    target_name = node.get("_target_")
    try:
        target = get_object(target_name)
    except Exception:
        errors.append(f"{key}._target_: cannot import {target_name!r}")
        return
    init = target.__init__ if inspect.isclass(target) else target
    try:
        signature = inspect.signature(init)
    except (TypeError, ValueError):
        return
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # unresolvable forward references: use the annotations that are objects
        hints = {n: p.annotation for n, p in signature.parameters.items() if not isinstance(p.annotation, str)}
    params = signature.parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name in node:
        if name.startswith("_") and name.endswith("_"):
            continue
        full = f"{key}.{name}" if key else name
        if name not in params:
            if not accepts_any:
                close = difflib.get_close_matches(name, list(params), n=1)
                hint = f"; did you mean {key}.{close[0]}?" if close else ""
                errors.append(f"{full}: unknown key (not a parameter of {target_name}){hint}")
            continue
        value = OmegaConf.select(node, name)  # resolved
        if isinstance(value, DictConfig) and "_target_" in value:
            continue
        expected = hints.get(name, inspect.Parameter.empty)
        if not _matches(value, expected):
            errors.append(f"{full}={value!r}: wrong type, {target_name} expects {expected}")


def validate_config(cfg: DictConfig) -> None:
    """Raises ConfigError naming every offending key, before any work is done."""
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        raise ConfigError(f"{err.full_key}: required value is missing (set it on the command line)") from None
    except InterpolationResolutionError as err:
        # OmegaConf wraps a resolver's exception in a one-line summary: keep the resolver's words
        message = str(err).splitlines()[0].split("raised while resolving interpolation: ", 1)[-1]
        raise ConfigError(message if message.startswith(err.full_key) else f"{err.full_key}: {message}") from None
    errors: list[str] = []

    def walk(node, key: str) -> None:
        if isinstance(node, DictConfig):
            if "_target_" in node:
                _check_target(node, key, errors)
            for name in node:
                walk(node._get_node(name), f"{key}.{name}" if key else str(name))
        elif isinstance(node, ListConfig):
            for i, item in enumerate(node):
                walk(item, f"{key}[{i}]")

    walk(cfg, "")
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
