"""What a TPU run (``hardware=tpu``, torch_xla) adds to Lightning's XLA support, each for a reason measured
on torch_xla's CPU device (docs/scaling-out.md, ``tests/xla/run.sh``):

* :class:`XlaSync`: Lightning cuts XLA's lazy graph after each optimizer step only, so a whole validation
  becomes one graph, compiled at its end and run again for every value read from it. A cut after each
  evaluation batch gives one small graph, compiled once.
* :func:`bf16_weights_precision`: Lightning's ``bf16-true`` on XLA sets ``XLA_USE_BF16=1`` (deprecated in
  torch_xla 2.6 and later), which stores every float tensor as bf16: metric sums, the logged learning
  rate and loss (a 20-step run ended at validation loss 9.81 against 8.78 in fp32). This one does what
  Lightning's ``bf16-true`` does on a GPU instead: the model's weights in bf16, metrics in fp32.
* :func:`atomic_xla_checkpoint_io`: XLA's checkpoint writer, through a temporary file renamed into place
  (as :class:`~bert_exp.runner.checkpoint_io.AtomicCheckpointIO` on other devices).

torch_xla is imported only when one of them is built: a TPU run.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import torch


class XlaSync(L.Callback):
    """A graph cut (``torch_xla.sync()``) after every evaluation batch."""

    @staticmethod
    def _sync(*args, **kwargs) -> None:
        import torch_xla

        torch_xla.sync()

    on_validation_batch_end = on_test_batch_end = on_predict_batch_end = _sync


def bf16_weights_precision():
    """Lightning's XLA precision plugin, set up as ``32-true`` (no ``XLA_USE_BF16``), that puts the module's
    weights in bf16 and keeps torchmetrics states in fp32 (``module.to(bf16)`` would take them too)."""
    from lightning.pytorch.plugins.precision.half import HalfPrecision
    from lightning.pytorch.plugins.precision.xla import XLAPrecision
    from torchmetrics import Metric

    class XLABf16WeightsPrecision(XLAPrecision):
        def __init__(self):
            super().__init__("32-true")
            self.precision = "bf16-true"
            self._desired_input_dtype = self._desired_dtype = torch.bfloat16

        def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
            module = module.to(dtype=torch.bfloat16)
            for metric in module.modules():
                if isinstance(metric, Metric):
                    metric.set_dtype(torch.float32)
            return module

        tensor_init_context = HalfPrecision.tensor_init_context
        module_init_context = HalfPrecision.module_init_context
        forward_context = HalfPrecision.forward_context
        convert_input = HalfPrecision.convert_input

    return XLABf16WeightsPrecision()


def atomic_xla_checkpoint_io():
    from lightning.fabric.plugins.io.xla import XLACheckpointIO

    class AtomicXLACheckpointIO(XLACheckpointIO):
        def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
            path = Path(path)
            partial = path.with_name(path.name + ".partial")
            super().save_checkpoint(checkpoint, partial, storage_options)
            if partial.exists():  # the process that wrote it (XLA writes from the first only)
                os.replace(partial, path)

    return AtomicXLACheckpointIO()


def xla_device_count() -> int:
    """The XLA devices of this host as Lightning counts them (``devices: auto``): 4 on a v4-8 or v5p-8, 8 on
    a v2-8 or v3-8."""
    from lightning.fabric.accelerators.xla import XLAAccelerator

    return XLAAccelerator.auto_device_count()
