"""BERT's optimisation recipe: AdamW without weight decay on biases and LayerNorm, linear warmup then
linear decay to zero.

Two shapes of the schedule after warm-up (``decay``):

* ``huggingface`` (default; transformers' ``get_linear_schedule_with_warmup``): warm-up
  ``(step + 1) / W``, then ``(T - step) / (T - W)``, a straight line from the peak at W to 0 at T;
* ``google`` (the original BERT, ``optimization.py``): ``polynomial_decay`` of power 1 over all T steps,
  ``1 - step / T``, with warm-up ``step / W`` overriding the first W steps. After warm-up the rate is
  ``(T - W) / T`` times HuggingFace's, so it drops from ``1 - W/T`` of the peak at step W.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

# BERT's exclusions, by parameter-name suffix (the original: ["LayerNorm", "layer_norm", "bias"])
DEFAULT_NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias")


@dataclass
class OptimSettings:
    """The ``optim`` config group, built by Hydra and handed to the task whole: the optimizer factory
    (parameter groups -> optimizer), the scheduler factory (None: a constant rate) and the parameter-name
    suffixes exempt from weight decay."""

    optimizer: OptimizerFactory
    scheduler: SchedulerFactory | None = None
    no_decay: list[str] = field(default_factory=lambda: list(DEFAULT_NO_DECAY))

    def __post_init__(self):
        self.no_decay = list(self.no_decay)  # a ListConfig from Hydra


def parameter_groups(model: nn.Module, weight_decay: float, no_decay: Iterable[str] = DEFAULT_NO_DECAY) -> list[dict]:
    no_decay = tuple(no_decay)
    decay, exempt, seen = [], [], set()
    for name, param in model.named_parameters():
        if not param.requires_grad or id(param) in seen:  # tied weights appear once
            continue
        seen.add(id(param))
        (exempt if name.endswith(no_decay) else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": exempt, "weight_decay": 0.0}]


def check_warmup(warmup_steps: int | None, warmup_ratio: float | None, on_budget: bool) -> None:
    """The warm-up is given once: in steps, or as a share of training (the only way over a budget)."""
    if warmup_steps is not None and warmup_ratio is not None:
        raise ValueError("give optim.scheduler.warmup_steps or optim.scheduler.warmup_ratio, not both")
    if on_budget and warmup_steps is not None:
        raise ValueError("a budget lays the schedule over time or tokens, not steps: give "
                         "optim.scheduler.warmup_ratio and set optim.scheduler.warmup_steps=null")


def warmup_length(total_steps: int, warmup_steps: int | None, warmup_ratio: float | None) -> int:
    return warmup_steps if warmup_steps is not None else round((warmup_ratio or 0.0) * total_steps)


def linear_warmup_decay(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int | None = None,
    warmup_ratio: float | None = None,
    decay: str = "huggingface",
    progress: Callable[[], float] | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """lr * step/warmup during warmup, then linearly down to 0 at ``total_steps``.

    Give ``warmup_steps`` (pre-training: 10k) or ``warmup_ratio`` (fine-tuning: 0.1 of all steps);
    ``decay`` is ``huggingface`` or ``google`` (see the module's docstring). ``step`` is the number of
    optimizer steps taken before the one the factor applies to (TF's ``global_step``).

    With ``progress`` (a training budget's clock: the fraction of it spent, 0..1) the same shapes are
    laid over the budget instead of over ``total_steps``: warm-up is ``warmup_ratio`` of the budget and
    the rate reaches 0 when the budget is spent, however many steps that turns out to be.
    """
    check_warmup(warmup_steps, warmup_ratio, progress is not None)
    if decay not in ("huggingface", "google"):
        raise ValueError(f"optim.scheduler.decay={decay!r}: expected huggingface or google")
    warmup = warmup_length(total_steps, warmup_steps, warmup_ratio)
    total_steps = max(total_steps, 1)

    def google(step: int) -> float:
        if step < warmup:
            return step / warmup
        return max(0.0, 1.0 - min(step, total_steps) / total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    if progress is not None:
        w = warmup_ratio or 0.0

        def budget_factor(_step: int) -> float:
            p = progress()
            if p < w:
                return p / w
            return max(0.0, 1.0 - p) if decay == "google" else max(0.0, (1.0 - p) / (1.0 - w))

        return torch.optim.lr_scheduler.LambdaLR(optimizer, budget_factor)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, google if decay == "google" else factor)


# the decay's shape over its share of training, x from 0 to 1: 1 - x, ModernBERT's 1 - sqrt(x) (Hägele et
# al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"), or a half cosine
DECAY_SHAPES = {"linear": lambda x: 1.0 - x, "1-sqrt": lambda x: 1.0 - math.sqrt(x),
                "cosine": lambda x: 0.5 * (1.0 + math.cos(math.pi * x))}


def warmup_stable_decay(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int | None = None,
    warmup_ratio: float | None = None,
    decay_ratio: float = 0.1,
    decay_shape: str = "1-sqrt",
    final_lr_ratio: float = 0.0,
    initial_lr_ratio: float = 0.0,
    progress: Callable[[], float] | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Warm-up, stable, decay ("trapezoidal"; ModernBERT's schedule): a linear warm-up over the first W
    steps (``warmup_steps``, or ``warmup_ratio`` of all) from ``initial_lr_ratio * lr`` (at 0:
    ``lr * (step + 1) / W``), then ``lr`` until the last ``decay_ratio`` of the steps, over which it falls
    along ``decay_shape`` to ``final_lr_ratio * lr``. Without a stable part it is a triangle: cramming's
    ``budget-triangle2`` is warm-up 0.75 from 0.25, linear decay 0.25.

    With ``progress`` (a training budget's clock, 0..1), the same shape over the budget, warm-up and
    decay as its fractions."""
    check_warmup(warmup_steps, warmup_ratio, progress is not None)
    if decay_shape not in DECAY_SHAPES:
        raise ValueError(f"optim.scheduler.decay_shape={decay_shape!r}: expected one of {', '.join(DECAY_SHAPES)}")
    if not all(0 <= r <= 1 for r in (decay_ratio, final_lr_ratio, initial_lr_ratio)):
        raise ValueError(f"optim.scheduler: decay_ratio={decay_ratio}, final_lr_ratio={final_lr_ratio} and "
                         f"initial_lr_ratio={initial_lr_ratio} are fractions, between 0 and 1")
    if warmup_ratio is not None and warmup_ratio + decay_ratio > 1 + 1e-9:
        raise ValueError(f"optim.scheduler: warmup_ratio={warmup_ratio} runs into the decay (decay_ratio={decay_ratio})")
    shape = DECAY_SHAPES[decay_shape]

    def warming(x: float) -> float:  # x: how far into the warm-up, 0..1
        return initial_lr_ratio + (1.0 - initial_lr_ratio) * x

    def decayed(x: float) -> float:  # x: how far into the decay, 0..1
        return final_lr_ratio + (1.0 - final_lr_ratio) * shape(min(max(x, 0.0), 1.0))

    if progress is not None:
        w, start = warmup_ratio or 0.0, 1.0 - decay_ratio

        def budget_factor(_step: int) -> float:
            p = progress()
            if p < w:
                return warming(p / w)
            return 1.0 if p < start or not decay_ratio else decayed((p - start) / decay_ratio)

        return torch.optim.lr_scheduler.LambdaLR(optimizer, budget_factor)
    total_steps = max(total_steps, 1)
    warmup = warmup_length(total_steps, warmup_steps, warmup_ratio)
    # the decay starts after the warm-up: two ratios that add up to 1 may round into each other, and a
    # short run (a few max_steps) may not reach the end of a preset's warm-up steps, as with BERT's schedule
    start = max(total_steps - round(decay_ratio * total_steps), warmup)
    decay_steps = max(total_steps - start, 0)

    def factor(step: int) -> float:
        if step < warmup:
            return warming((step + 1) / warmup)
        return 1.0 if step < start else decayed((step - start) / max(decay_steps, 1))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


OptimizerFactory = Callable[..., torch.optim.Optimizer]
SchedulerFactory = Callable[..., torch.optim.lr_scheduler.LRScheduler]
