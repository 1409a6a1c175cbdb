"""A callback that writes torch_xla's counters after every training batch and at the end of each
validation to ``RUN/xla_counters.jsonl``: compilations so far, and the ops that fell back to the CPU
(``aten::`` counters; ``aten::_local_scalar_dense`` is a value read to the host, not a fallback)."""

import json
import os

import lightning as L
import torch_xla.debug.metrics as met


def counters() -> dict:
    compiles = met.metric_data("CompileTime")
    return {"compiles": compiles[0] if compiles else 0, "compile_seconds": round(compiles[1] / 1e9, 2) if compiles else 0.0,
            "aten": {n: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::")}}


class XlaCounters(L.Callback):
    def _write(self, trainer, event: str) -> None:
        if trainer.is_global_zero:
            with open(os.path.join(trainer.default_root_dir, "xla_counters.jsonl"), "a") as f:
                f.write(json.dumps({"event": event, "step": trainer.global_step, **counters()}) + "\n")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._write(trainer, "train_batch")

    def on_validation_end(self, trainer, pl_module):
        self._write(trainer, "validation")
