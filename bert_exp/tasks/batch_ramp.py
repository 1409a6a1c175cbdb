"""A batch-size ramp (``trainer.batch_ramp``): the optimizer's batch grows from ``start`` sequences to
``global_batch_size`` while the microbatch stays the same, so memory does not grow with it; a step
accumulates as many microbatches as the ramp says at the moment the step begins.

Two shapes, the papers' own:

* ``linear`` (cramming, ``train/bert-o4.yaml``: "reaches the target 8192 at 60% of the total budget"):
  the batch grows in proportion to the run's progress, one microbatch more at each equal share of the
  ramp;
* ``steps`` (ModernBERT's ``BatchSizeWarmupScheduler``, ``src/sequence_packer.py``): every batch size is
  held for the same number of optimizer steps, so a larger size holds for more tokens.

Lightning's own accumulation steps when the epoch's batch count is a multiple of a fixed number, so a
ramp steps the optimizer here instead (Lightning's manual optimisation). Which microbatch closes a step
follows from the ramp and the progress alone, and the checkpoint holds the count of microbatches
trained: a resumed run groups the same microbatches into the same steps.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

SHAPES = ("linear", "steps")


@dataclass(frozen=True)
class BatchRamp:
    """``start`` and ``final`` in microbatches (the global batch over world size x device batch); the
    ramp is over when ``progress`` reaches 1 (a share of the run, or tokens over the ramp's tokens)."""

    start: int
    final: int
    shape: str = "linear"

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise ValueError(f"trainer.batch_ramp.shape={self.shape!r}: expected one of {', '.join(SHAPES)}")
        if not 1 <= self.start <= self.final:
            raise ValueError(f"trainer.batch_ramp: start ({self.start} microbatches) must be at least one "
                             f"microbatch and at most the global batch ({self.final})")

    def microbatches(self, progress: float) -> int:
        """How many microbatches the step that begins at ``progress`` accumulates."""
        levels = self.final - self.start  # the sizes below the final one, each one microbatch apart
        if progress >= 1 or levels == 0:
            return self.final
        progress = max(progress, 0.0)
        if self.shape == "linear":  # each size holds for an equal share of the ramp
            return self.start + min(int(progress * levels), levels - 1)
        # steps: each size for the same number of steps, so for a share of the ramp's tokens in
        # proportion to its size; the first size whose cumulative share exceeds the progress
        sizes = range(self.start, self.final)
        total, cumulative = sum(sizes), 0
        for size in sizes:
            cumulative += size
            if progress < cumulative / total:
                return size
        return self.final


class RampedAccumulation:
    """Accumulates the microbatches of each step by the ramp and steps the optimizer, its schedule and
    the clipping itself (Lightning's manual optimisation). ``progress`` reads the run's progress when a
    step begins. The counts are saved in the checkpoint; the runner's callbacks ask :attr:`mid_step`
    so that they save, stop and count only where a step has ended."""

    def __init__(self, ramp: BatchRamp, progress: Callable[[RampedAccumulation], float],
                 clip_val: float | None = None, clip_algorithm: str | None = None):
        self.ramp, self.progress = ramp, progress
        self.clip_val, self.clip_algorithm = clip_val, clip_algorithm
        self.microbatches_done = 0  # microbatches trained on, in completed steps
        self.steps_done = 0
        self.group_size = 0  # microbatches of the step in progress (0: none begun)
        self.in_group = 0  # of them, trained on so far

    @property
    def mid_step(self) -> bool:
        """Whether the microbatch just trained on left its step unfinished."""
        return self.in_group != 0

    def train_on(self, module, loss) -> None:
        if self.in_group == 0:
            self.group_size = self.ramp.microbatches(self.progress(self))
        self.in_group += 1
        closes = self.in_group == self.group_size
        # only the step's last microbatch reduces the gradients across processes (DDP)
        block = getattr(module.trainer.strategy, "block_backward_sync", None)
        with contextlib.nullcontext() if closes or block is None else block():
            module.manual_backward(loss / self.group_size)
        if not closes:
            return
        optimizer = module.optimizers()
        optimizer.step()  # Lightning's: clipping in on_before_optimizer_step, after any unscaling
        optimizer.zero_grad(set_to_none=True)
        scheduler = module.lr_schedulers()
        if scheduler is not None:
            scheduler.step()
        self.microbatches_done += self.group_size
        self.steps_done += 1
        self.in_group = self.group_size = 0

    def clip(self, module, optimizer) -> None:
        if self.clip_val:
            module.configure_gradient_clipping(optimizer, self.clip_val, self.clip_algorithm)

    def state_dict(self) -> dict:
        return {"microbatches_done": self.microbatches_done, "steps_done": self.steps_done,
                "in_group": self.in_group, "ramp": [self.ramp.start, self.ramp.final, self.ramp.shape]}

    def load_state_dict(self, state: dict) -> None:
        self.microbatches_done = int(state.get("microbatches_done", 0))
        self.steps_done = int(state.get("steps_done", 0))
        if state.get("in_group"):  # a checkpoint saved inside a step (a validation's best): its gradients
            log.warning("the checkpoint was saved %d microbatch(es) into an optimizer step, whose gradients "
                        "it does not hold: the next step begins afresh", state["in_group"])
        self.in_group = self.group_size = 0

    def describe(self) -> dict:
        return {"start_microbatches": self.ramp.start, "final_microbatches": self.ramp.final,
                "shape": self.ramp.shape, "steps": self.steps_done, "microbatches": self.microbatches_done}

