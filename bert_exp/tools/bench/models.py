"""Builds the two sides of a model benchmark from a spec: task, size (a ``conf/model`` name), batch,
sequence length, precision, device."""

from __future__ import annotations

import dataclasses

import torch
import yaml

from ...resources import resource_dir
from ...model import BertConfig
from .steps import (
    build_ours,
    build_reference,
    loss_ours,
    loss_reference,
    make_step,
    random_batch,
    reference_inputs,
    to_device,
)


def model_config(size: str) -> BertConfig:
    path = resource_dir("conf") / "model" / f"{size}.yaml"
    if not path.is_file():
        sizes = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise SystemExit(f"error: no model size {size!r} (conf/model has {', '.join(sizes)})")
    values = yaml.safe_load(path.read_text())
    values.pop("_target_", None)
    return BertConfig(**values)


def make_steps(spec: dict, impls=("ours", "transformers")) -> dict:
    """{impl: step} for the requested sides, on one batch; the reference holds a copy of our weights.
    A side not requested is not kept (the memory run measures one side alone)."""
    config = model_config(spec["size"])
    device = torch.device(spec["device"])
    torch.manual_seed(spec.get("seed", 0))
    checkpointing = spec.get("gradient_checkpointing", False)  # each layer recomputed in backward, both sides
    ours = build_ours(spec["task"], dataclasses.replace(config, gradient_checkpointing=checkpointing))
    models = {"ours": (ours, loss_ours)}
    if "transformers" in impls:
        reference = build_reference(spec["task"], config, ours)
        if checkpointing:
            reference.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        models["transformers"] = (reference, loss_reference)
    predictions = spec.get("max_predictions", max(1, round(spec["seq"] * 0.15)))
    batch = to_device(random_batch(config, spec["batch"], spec["seq"], predictions), device)
    batches = {"ours": batch, "transformers": reference_inputs(spec["task"], batch)}
    fused = spec.get("fused", True)
    return {impl: make_step(spec["task"], *models[impl], batches[impl], spec["precision"], device, fused)
            for impl in impls}
