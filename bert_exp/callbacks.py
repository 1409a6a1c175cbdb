"""Callbacks of our own (everything else comes from Lightning)."""

from __future__ import annotations

import time

import lightning as L


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
    ``dynamic: false`` suits fixed-shape batches (``data.pad_to_max_length=true``, as on TPU): a batch
    of a new shape recompiles, so with variable lengths leave it null and let torch decide."""

    def __init__(self, mode: str | None = None, dynamic: bool | None = None, fullgraph: bool = False,
                 backend: str = "inductor"):
        self.options = {"mode": mode, "dynamic": dynamic, "fullgraph": fullgraph, "backend": backend}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        pl_module.model.compile(**self.options)
