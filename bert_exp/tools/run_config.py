"""A finished run's configuration with changes (``python -m bert_exp.score RUN KEY=VALUE ...``).

The run saved its configuration resolved (``config.yaml``) and as composed (``.hydra/config.yaml``, its
interpolations kept). An override is parsed with Hydra's own grammar and applied to the resolved one;
every value the run derived from an overridden key (``data.train_file: ${paths.data_dir}/...``) is derived
again from the new value, so ``paths.data_dir=...`` moves every data file, as it does on ``python -m
bert_exp``. A key the run's config lacks (without ``+``), a value that is not an override and an
interpolation that no longer resolves are each one line naming the override; the result is checked as a
run's config is before any work (:func:`bert_exp.runner.validation.validate_config`)."""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from ..errors import UserError

_INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")
_DOTTED = re.compile(r"[A-Za-z_][\w-]*(?:\.[\w-]+)*")


def _leaves(node, prefix: str = ""):
    """(dotted key, value) of every leaf of a plain container."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, f"{prefix}[{i}]")
    else:
        yield prefix, node


def _references(value) -> set[str]:
    """The keys an interpolation string names (``${a.b}``, ``${oc.dict.keys:data.val_files}``)."""
    if not isinstance(value, str):
        return set()
    return {name for inner in _INTERPOLATION.findall(value) for name in _DOTTED.findall(inner)}


def _touches(reference: str, key: str) -> bool:
    return reference == key or reference.startswith(key + ".") or key.startswith(reference + ".")


def _top(key: str) -> str:
    """The dotted key of a leaf (its list positions dropped: the list is restored whole)."""
    return key.split("[", 1)[0]


def _raw(raw: dict, key: str):
    """The value at a dotted key of a plain container, as composed (its interpolations kept)."""
    node = raw
    for part in key.split("."):
        node = node[part]
    return node


def parse(overrides: list[str]):
    """Hydra's parse of the overrides; one line naming the first it cannot read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for text in overrides:
        if "=" not in text and not text.startswith("~"):
            raise UserError(f"{text}: not an override (KEY=VALUE, e.g. data.loader.eval_batch_size=64)")
    parser, parsed = OverridesParser.create(), []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except HydraException as err:
            raise UserError(f"{text}: not an override Hydra reads ({str(err).strip().splitlines()[0]})") from None
    return parsed


def run_config(run_dir: Path, overrides: list[str]) -> DictConfig:
    from ..runner import resolvers  # noqa: F401  the resolvers the run's config may use
    from ..runner.validation import unknown_key, validate_config

    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{path}: no such file (a run directory of python -m bert_exp holds it)")
    cfg = OmegaConf.load(path)
    if not overrides:
        return cfg
    parsed = parse(overrides)
    composed = run_dir / ".hydra" / "config.yaml"
    raw = OmegaConf.to_container(OmegaConf.load(composed), resolve=False) if composed.is_file() else {}
    derived = {key: value for key, value in _leaves(raw) if _references(value)}
    changed = []
    for override, text in zip(parsed, overrides):
        key = override.key_or_group
        if override.package:
            raise UserError(f"{text}: a config group's package (@) cannot change in a run's config")
        exists = OmegaConf.select(cfg, key, default=_MISSING, throw_on_resolution_failure=False) is not _MISSING
        if override.is_delete():
            if not exists:
                raise UserError(f"{text}: {key} is not in the run's config")
            parent, _, name = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            del node[name]
        else:
            if not exists and not override.is_add():
                parent, _, name = key.rpartition(".")
                node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
                siblings = [str(k) for k in node] if isinstance(node, DictConfig) else []
                raise UserError(f"{unknown_key(key, siblings)} (the run's config, {path}; +{key}=... adds one)")
            value = override.value()
            OmegaConf.update(cfg, key, value if not isinstance(value, (dict, list)) else OmegaConf.create(value),
                             merge=False, force_add=True)
        changed.append(key)
    # every value the run derived from a changed key, derived again (until nothing more changes)
    restored: set[str] = set()
    while True:
        more = {_top(key) for key, value in derived.items()
                if _top(key) not in restored and not any(_touches(_top(key), c) for c in changed[:len(overrides)])
                and any(_touches(ref, c) for ref in _references(value) for c in changed)}
        if not more:
            break
        for key in more:
            value = _raw(raw, key)
            OmegaConf.update(cfg, key, OmegaConf.create(value) if isinstance(value, (dict, list)) else value,
                             merge=False)
        restored |= more
        changed += sorted(more)
    try:
        OmegaConf.resolve(cfg)
    except Exception as err:  # noqa: BLE001  OmegaConf's resolution errors: one line
        raise UserError(f"{' '.join(overrides)}: the run's config no longer resolves: "
                        f"{str(err).strip().splitlines()[0]}") from None
    validate_config(cfg)
    return cfg


_MISSING = object()
