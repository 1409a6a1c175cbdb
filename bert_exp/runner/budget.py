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

from ..errors import UserError

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

    def fraction(self) -> float:
        return min(self.spent / self.spec.amount, 1.0)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.spec.amount


class Budget(L.Callback):
    """Advances the clock after every batch (tokens: the real, non-padding tokens of all processes; time:
    wall time since training started, validation included) and stops the run when it is spent, at an
    optimizer-step boundary. Lightning then ends the fit as at ``max_steps``: the final checkpoint and
    validation follow."""

    def __init__(self, clock: BudgetClock):
        self.clock = clock
        self._last: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._last = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.clock.spec.kind == "tokens":
            tokens = batch["attention_mask"].sum()
            self.clock.spent += float(trainer.strategy.reduce(tokens.float(), reduce_op="sum"))
        else:
            now = time.monotonic()
            self.clock.spent += now - (self._last if self._last is not None else now)
            self._last = now
        if trainer.fit_loop._should_accumulate():
            return  # mid-accumulation: stop only where the optimizer has stepped
        if trainer.strategy.reduce_boolean_decision(self.clock.exhausted, all=False):
            trainer.should_stop = True

    def state_dict(self) -> dict:
        return {"kind": self.clock.spec.kind, "amount": self.clock.spec.amount, "spent": self.clock.spent}

    def load_state_dict(self, state: dict) -> None:
        if state.get("kind") == self.clock.spec.kind:
            self.clock.spent = float(state["spent"])
