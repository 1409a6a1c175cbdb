"""Builds the two sides of a model benchmark from a spec: task, size (a ``conf/model`` name), batch,
sequence length, precision, device."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from ..config import resource_dir
from ..model import BertConfig
from .steps import (
    build_ours,
    build_reference,
    loss_ours,
    loss_reference,
    make_step,
    random_batch,
)


def model_config(size: str) -> BertConfig:
    path = resource_dir("conf") / "model" / f"{size}.yaml"
    if not path.is_file():
        sizes = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise SystemExit(f"error: no model size {size!r} (conf/model has {', '.join(sizes)})")
    values = OmegaConf.to_container(OmegaConf.load(path))
    values.pop("_target_", None)
    return BertConfig(**values)


def make_pair(spec: dict) -> dict:
    """Both sides: {'ours': step, 'transformers': step}; the reference holds a copy of our weights."""
    return {impl: make_pair_step(spec, impl) for impl in ("ours", "transformers")}


def make_pair_step(spec: dict, impl: str):
    """One side's step. The same seed gives both sides the same initial weights and the same batch."""
    config = model_config(spec["size"])
    device = torch.device(spec["device"])
    torch.manual_seed(spec.get("seed", 0))
    model = build_ours(spec["task"], config)
    loss = loss_ours
    if impl == "transformers":
        model, loss = build_reference(spec["task"], config, model), loss_reference
    predictions = spec.get("max_predictions", max(1, round(spec["seq"] * 0.15)))
    batch = random_batch(config, spec["batch"], spec["seq"], predictions).to(device)
    return make_step(spec["task"], model, loss, batch, spec["precision"], device, spec.get("fused", True))
