"""Checkpoint files that are either whole or absent."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from ..errors import OutOfSpace


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
        try:
            with open(partial, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, path)
        except BaseException as err:
            partial.unlink(missing_ok=True)  # never a half-written file behind
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                kept = " (the previous one is intact)" if path.exists() else ""
                raise OutOfSpace(f"{path.parent}: no space left on the device while saving {path.name}{kept}; "
                                 "free some space and resume from the run directory (ckpt_path=RUN_DIR)") from None
            raise
