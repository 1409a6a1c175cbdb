"""A training budget (``trainer.budget``): wall time (``90s``, ``10m``, ``1h``) or tokens (``500k``,
``200M``, ``1.5B``). The run stops when it is spent, and the learning-rate schedule is laid over the
budget instead of over ``max_steps``: warm-up is a fraction of it and the decay reaches its end value
when the budget does, however fast the machine turns out to be. The clock travels in checkpoints, so a
resumed run ends at the same total budget.

Units are case-sensitive: ``m`` is minutes, ``M`` millions of tokens.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import lightning as L
import torch

from ..errors import UserError
from .callbacks import mid_step

TIME_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
TOKEN_UNITS = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-zA-Z]?)\s*$")


class BudgetError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class BudgetSpec:
    kind: str  # "seconds" | "tokens"
    amount: float

    def describe(self) -> str:
        if self.kind == "seconds":
            return f"{self.amount / 60:g} min of wall time"
        return f"{self.amount:,.0f} tokens"


def parse_budget(text: str | int | float) -> BudgetSpec:
    """``"10m"`` -> 600 seconds; ``"200M"`` -> 2e8 tokens; a bare number is tokens."""
    match = _PATTERN.match(str(text))
    unit = match.group(2) if match else None
    if match is None or (unit not in TIME_UNITS and unit not in TOKEN_UNITS):
        raise BudgetError(f"trainer.budget={text!r}: expected wall time (90s, 10m, 1h) or tokens (500k, 200M, 1.5B)")
    value = float(match.group(1))
    spec = (BudgetSpec("seconds", value * TIME_UNITS[unit]) if unit in TIME_UNITS
            else BudgetSpec("tokens", value * TOKEN_UNITS[unit]))
    if not spec.amount > 0 or not math.isfinite(spec.amount):
        raise BudgetError(f"trainer.budget={text!r}: must be a positive amount")
    return spec


class BudgetClock:
    """How much of the budget is spent; the schedule reads :meth:`fraction`."""

    def __init__(self, spec: BudgetSpec):
        self.spec = spec
        self.spent = 0.0
        self.unread = 0.0  # an estimate of what is spent but not yet read from the device

    def fraction(self) -> float:
        return min((self.spent + self.unread) / self.spec.amount, 1.0)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.spec.amount


class Budget(L.Callback):
    """Advances the clock after every batch (tokens: the real, non-padding tokens of all processes; time:
    wall time since training started, validation included) and stops the run when it is spent, at an
    optimizer-step boundary. Lightning then ends the fit as at ``max_steps``: the final checkpoint and
    validation follow.

    Tokens are counted on the device and read (one host synchronisation, a sum over processes) only every
    ``check_every`` optimizer steps (the trainer's ``log_every_n_steps`` by default: the steps Lightning
    reads its logged values at anyway), and at every step once the budget is within two steps' worth of
    its end, so the run still stops at the step that spends it. Between reads the schedule follows an
    estimate (the tokens per step of the last reads); everything it depends on is in the checkpoint, so a
    resumed run follows the same schedule."""

    def __init__(self, clock: BudgetClock, check_every: int | None = None):
        self.clock = clock
        self.check_every = check_every
        self._last: float | None = None
        self._pending = None  # tokens of this process not yet read (a device tensor)
        self._steps_pending = 0  # optimizer steps since the last read
        self._rate: float | None = None  # tokens per optimizer step, all processes, as last read
        self._restored_pending: float | None = None
        self._trainer = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._trainer = trainer

    def on_train_start(self, trainer, pl_module) -> None:
        self._last = time.monotonic()
        if self.check_every is None:
            self.check_every = max(int(trainer.log_every_n_steps or 1), 1)

    def _due(self, trainer) -> bool:
        """Whether to read now: the same answer on every process (from values they share)."""
        if self._rate is None or trainer.global_step % self.check_every == 0:
            return True
        return self.clock.spent + self._rate * (self._steps_pending + 2) >= self.clock.spec.amount

    def _reduced_pending(self) -> float:
        """The unread tokens of all processes (one host synchronisation; a collective under DDP)."""
        trainer = self._trainer
        pending = self._pending
        if pending is None:
            pending = torch.zeros((), dtype=torch.float64, device=trainer.strategy.root_device)
        return float(trainer.strategy.reduce(pending.double(), reduce_op="sum"))

    def _read(self) -> None:
        tokens = self._reduced_pending()
        if self._steps_pending:
            self._rate = tokens / self._steps_pending
        self.clock.spent += tokens
        self.clock.unread = 0.0
        self._pending, self._steps_pending = None, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._restored_pending is not None:  # unread tokens from a checkpoint: counted on one process
            if trainer.global_rank == 0:
                self._pending = torch.tensor(self._restored_pending, dtype=torch.float64,
                                             device=trainer.strategy.root_device)
            self._restored_pending = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.clock.spec.kind == "tokens":
            tokens = batch["attention_mask"].sum()  # stays on the device until read
            self._pending = tokens if self._pending is None else self._pending + tokens
        else:
            now = time.monotonic()
            self.clock.spent += now - (self._last if self._last is not None else now)
            self._last = now
        if mid_step(trainer):
            return  # mid-accumulation: stop only where the optimizer has stepped
        if self.clock.spec.kind == "tokens":
            self._steps_pending += 1
            if not self._due(trainer):
                self.clock.unread = self._rate * self._steps_pending  # the schedule's estimate until read
                return
            self._read()
        if trainer.strategy.reduce_boolean_decision(self.clock.exhausted, all=False):
            trainer.should_stop = True

    def state_dict(self) -> dict:
        state = {"kind": self.clock.spec.kind, "amount": self.clock.spec.amount, "spent": self.clock.spent}
        if self.clock.spec.kind == "tokens" and self._trainer is not None:
            # every process saves (Lightning builds the checkpoint on each): the sum is taken on all
            state.update(unread_tokens=self._reduced_pending(), steps_unread=self._steps_pending,
                         tokens_per_step=self._rate, unread=self.clock.unread)
        return state

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") == self.clock.spec.kind:
            self.clock.spent = float(state["spent"])
            self.clock.unread = float(state.get("unread", 0.0))
            self._restored_pending = state.get("unread_tokens") or None
            self._steps_pending = int(state.get("steps_unread", 0))
            self._rate = state.get("tokens_per_step")
