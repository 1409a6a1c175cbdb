"""Callbacks of our own (everything else comes from Lightning)."""

from __future__ import annotations

import logging
import os
import random
import time

import lightning as L
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)


class TokenThroughput(L.Callback):
    """Logs ``train/tokens_per_sec``: real (non-padding) tokens per second of training wall time,
    data loading included and validation excluded, summed over all processes."""

    def __init__(self, log_every_n_steps: int = 10):
        self.log_every_n_steps = log_every_n_steps
        self.total_tokens = 0
        self.total_seconds = 0.0
        self._window_tokens = 0
        self._window_seconds = 0.0
        self._last = None

    @property
    def tokens_per_sec(self) -> float | None:
        return self.total_tokens / self.total_seconds if self.total_seconds else None

    def _restart_clock(self, *args) -> None:
        self._last = time.perf_counter()

    on_train_epoch_start = _restart_clock
    on_validation_end = _restart_clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._last is None:
            self._last = now
            return
        tokens = int(batch["attention_mask"].sum()) * trainer.world_size
        seconds = now - self._last
        self._last = now
        self.total_tokens += tokens
        self.total_seconds += seconds
        self._window_tokens += tokens
        self._window_seconds += seconds
        if (trainer.global_step % self.log_every_n_steps == 0) and self._window_seconds > 0:
            pl_module.log("train/tokens_per_sec", self._window_tokens / self._window_seconds, on_step=True)
            self._window_tokens, self._window_seconds = 0, 0.0


class CompileModel(L.Callback):
    """Compiles the task's BERT with ``torch.compile`` when training starts (``+callbacks=compile``).

    ``nn.Module.compile`` works in place, so parameter names (and checkpoints) stay HuggingFace's.
    ``dynamic: false`` suits fixed-shape batches (``data.loader.pad_to_max_length=true``, as on TPU): a batch
    of a new shape recompiles, so with variable lengths leave it null and let torch decide."""

    def __init__(self, mode: str | None = None, dynamic: bool | None = None, fullgraph: bool = False,
                 backend: str = "inductor"):
        self.options = {"mode": mode, "dynamic": dynamic, "fullgraph": fullgraph, "backend": backend}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.model.compile(**self.options)


def _random_states() -> dict:
    # numpy's key as a tensor: checkpoints stay loadable with torch.load(weights_only=True)
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "numpy": (kind, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, gauss),
              "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def _restore_random_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    kind, key, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, key.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])


class RandomStates(L.Callback):
    """Puts every process's global random state (dropout draws from it) in each checkpoint, and
    restores it just before the first step of a resumed run, so the run continues as if never stopped.

    Nothing else in the data path draws from the global generators: samplers and masks have seeded
    generators of their own, so the state saved after step k is the state step k+1 starts from."""

    def __init__(self):
        self._to_restore: dict | None = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        states = _random_states()
        if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
            gathered = [None] * trainer.world_size  # every rank builds the checkpoint; rank 0 writes it
            dist.all_gather_object(gathered, states)
            checkpoint["random_states"] = gathered
        else:
            checkpoint["random_states"] = [states]

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        states = checkpoint.get("random_states")
        if states and len(states) == trainer.world_size:
            self._to_restore = states[trainer.global_rank]
        elif states:
            log.warning("the checkpoint holds random states for %d processes, not %d: they are not restored",
                        len(states), trainer.world_size)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._to_restore is not None:
            _restore_random_states(self._to_restore)
            self._to_restore = None


class LastCheckpoint(L.Callback):
    """Keeps ``last.ckpt`` current: every ``every_n_train_steps`` optimizer steps, after the final step,
    and on SIGTERM (a preempted or cancelled job) after the step in flight. A killed run loses at most
    N steps; a resumed one continues from here (``ckpt_path=RUN_DIR``).

    Lightning turns SIGTERM into an exception at the end of the current batch, on every rank; the
    checkpoint is written before the run stops. Files are replaced atomically (AtomicCheckpointIO)."""

    def __init__(self, dirpath: str, every_n_train_steps: int = 500):
        self.dirpath, self.every_n_train_steps = dirpath, every_n_train_steps
        self._saved_step = -1

    @property
    def path(self) -> str:
        return os.path.join(self.dirpath, "last.ckpt")

    def _save(self, trainer) -> None:
        if trainer.global_step != self._saved_step and not trainer.sanity_checking:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full training state
            self._saved_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.fit_loop._should_accumulate():
            return  # mid-accumulation: the optimizer has not stepped
        step = trainer.global_step
        if (self.every_n_train_steps and step % self.every_n_train_steps == 0) or step == trainer.max_steps:
            self._save(trainer)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.max_epochs is not None and trainer.max_epochs > 0 and trainer.current_epoch + 1 >= trainer.max_epochs:
            self._save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) and trainer.state.fn == "fit":
            self._save(trainer)
            log.warning("SIGTERM: saved %s at step %d", self.path, trainer.global_step)
