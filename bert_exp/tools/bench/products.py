"""A step's matrix products, timed alone.

``record_products`` runs one step under a dispatch mode and keeps every call torch's FLOP counter
counts (``mm``, ``addmm``, ``bmm``, the attention kernels ...) with its operands' shapes, strides and
dtypes; ``time_products`` replays each distinct call on fresh operands of the same layout and sums the
medians. That sum is what the step would take if nothing but its products ran, each as fast as it runs
on its own: against the measured step it splits the time into the products and everything else
(casts, element-wise work, the optimizer), which a step's single fraction of the matmul peak cannot.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from .hardware import median_seconds


@dataclass(frozen=True)
class TensorSpec:
    """An operand's layout, without its values."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: str

    def materialise(self) -> torch.Tensor:
        """A tensor of this layout (broadcast strides included) over a fresh storage of random values."""
        size = 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride)) if all(self.shape) else 0
        storage = torch.empty(size, dtype=self.dtype, device=self.device)
        if storage.is_floating_point():
            storage.normal_()
        else:
            storage.fill_(1)  # masks: attend everywhere
        return storage.as_strided(self.shape, self.stride)


def _freeze(value):
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), tuple(value.stride()), value.dtype, str(value.device))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _thaw(value):
    if isinstance(value, TensorSpec):
        return value.materialise()
    if isinstance(value, tuple):
        return tuple(_thaw(v) for v in value)
    return value


@dataclass(frozen=True)
class ProductCall:
    op: torch._ops.OpOverload
    args: tuple
    kwargs: tuple  # sorted (name, value) pairs
    flops: int

    def describe(self) -> str:
        """e.g. ``mm [3072,4096]t x [4096,768] bf16``: ``t`` marks an operand read transposed (its
        second-to-last dimension the contiguous one)."""
        tensors = [a for a in self.args if isinstance(a, TensorSpec)]
        shapes = " x ".join(f"[{','.join(map(str, a.shape))}]{'t' if _transposed(a) else ''}" for a in tensors)
        dtype = str(tensors[-1].dtype).removeprefix("torch.").replace("bfloat16", "bf16") if tensors else ""
        return f"{self.op.overloadpacket.__name__} {shapes} {dtype}".strip()


def _transposed(spec: TensorSpec) -> bool:
    return len(spec.shape) >= 2 and spec.shape[-1] > 1 and spec.shape[-2] > 1 and spec.stride[-2] == 1


@dataclass
class StepProducts:
    calls: Counter = field(default_factory=Counter)  # ProductCall -> times per step

    @property
    def flops(self) -> int:
        return sum(call.flops * n for call, n in self.calls.items())


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.products = StepProducts()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            call = ProductCall(func, _freeze(args), _freeze(kwargs), int(formula(*args, **kwargs, out_val=out)))
            self.products.calls[call] += 1
        return out


def record_products(step: Callable[[], object]) -> StepProducts:
    """The products of one call of ``step``, as torch's FLOP counter sees them (so their FLOPs are the
    counter's total)."""
    recorder = _Recorder()
    with recorder:
        step()
    return recorder.products


def time_products(products: StepProducts, device: torch.device, repeats: int = 5) -> list[dict]:
    """Each distinct call timed alone on fresh operands (one warm-up, median of ``repeats``), slowest
    share of the step first: {"call", "count", "flops", "seconds"} with seconds per call."""
    rows = []
    for call, count in products.calls.items():
        args, kwargs = _thaw(call.args), dict(_thaw(call.kwargs))
        seconds = median_seconds(lambda: call.op(*args, **kwargs), device, repeats)
        rows.append({"call": call.describe(), "count": count, "flops": call.flops, "seconds": seconds})
        del args, kwargs
    return sorted(rows, key=lambda r: -r["seconds"] * r["count"])


def products_alone_seconds(rows: list[dict]) -> float:
    return sum(r["seconds"] * r["count"] for r in rows)
