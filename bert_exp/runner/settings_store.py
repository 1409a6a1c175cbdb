"""The config nodes of the settings dataclasses, generated from them so their defaults live in one place.

Each node is the dataclass's ``_target_`` and its fields with their defaults (``???`` for a field
without one); a preset pulls it in through its defaults list (``- /settings@loader: loader``) and
lists only what it changes. ``--cfg job`` prints every field, as Hydra builds the dataclass from it.
Fields that the code derives rather than the user sets are left out (they keep their defaults
until the code fills them in)."""

from __future__ import annotations

import dataclasses

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from ..data import InstanceSettings, LoaderSettings, MaskingSettings, PrepareSettings
from ..tasks.optim import OptimSettings

# name in the `settings` group -> (dataclass, fields left out of the config)
SETTINGS = {
    "loader": (LoaderSettings, ()),
    "masking": (MaskingSettings, ()),
    # nsp and layout follow from data.objective / data.packing / data.nsp; file_boundaries, text_columns
    # from data.files
    "instances": (InstanceSettings, ("nsp", "layout", "file_boundaries", "text_columns")),
    "optim": (OptimSettings, ()),
    "prepare": (PrepareSettings, ()),
}


def settings_node(cls, leave_out=()) -> dict:
    node = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
    for f in dataclasses.fields(cls):
        if f.name in leave_out:
            continue
        if f.default is not dataclasses.MISSING:
            node[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            node[f.name] = f.default_factory()
        else:
            node[f.name] = MISSING
    return node


def register_settings() -> None:
    """Stores the nodes as the ``settings`` group (idempotent; composing a config needs it first)."""
    store = ConfigStore.instance()
    for name, (cls, leave_out) in SETTINGS.items():
        store.store(group="settings", name=name, node=settings_node(cls, leave_out), provider="bert_exp")
