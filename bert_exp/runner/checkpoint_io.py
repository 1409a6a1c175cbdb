"""Checkpoint files that are either whole or absent."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes a checkpoint to a temporary file beside its target, then renames it into place.

    A process killed while saving leaves the previous ``last.ckpt`` intact. (Lightning's own save goes
    through a temporary file in the system temp folder; moving it across file systems is a copy, which
    a kill can leave half-done.)"""

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        with open(partial, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
