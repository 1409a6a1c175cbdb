"""A weighted mean whose update never reads the device.

torchmetrics' ``MeanMetric`` checks every update for NaN (``nan_strategy``), which reads a value back to
the host at each validation batch: a synchronisation per batch on a GPU, and on XLA a cut in the graph;
its ``nan_strategy="disable"`` drops the weights (torchmetrics 1.9). A mean over a validation set has no
NaN to remove, so this one only adds.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric


class WeightedMean(Metric):
    """sum(value x weight) / sum(weight), summed across processes; NaN before any weight."""

    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros((), dtype=torch.float32), dist_reduce_fx="sum")
        self.add_state("weight", default=torch.zeros((), dtype=torch.float32), dist_reduce_fx="sum")

    def update(self, value: torch.Tensor, weight: torch.Tensor | float = 1.0) -> None:
        weight = torch.as_tensor(weight, dtype=torch.float32, device=self.total.device)
        self.total += (torch.as_tensor(value, device=self.total.device).float() * weight).sum()
        self.weight += weight.sum()

    def compute(self) -> torch.Tensor:
        return self.total / self.weight
