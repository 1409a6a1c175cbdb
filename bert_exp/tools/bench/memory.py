"""Peak memory of a few training steps of one implementation, in a process of its own.

``python -m bert_exp.bench.memory '{"impl": "ours", "task": ..., "size": ..., ...}'`` prints one JSON line.
"""

from __future__ import annotations

import json
import sys

import torch

from .hardware import current_rss_bytes, peak_rss_bytes
from ...records import dumps
from .models import make_steps
from ...runner.cpu_allocator import configure_cpu_allocator


def measure(spec: dict) -> dict:
    device = torch.device(spec["device"])
    configure_cpu_allocator(spec.get("cpu_allocator", "keep_freed"))
    if "batches_file" in spec:  # --rows: a pass over a real data set's batches
        from .rows import make_row_steps

        step = make_row_steps(spec, sides=(spec["impl"],))[spec["impl"]]
    else:
        step = make_steps(spec, impls=(spec["impl"],))[spec["impl"]]
    if spec.get("compile") and spec["impl"] == "ours":
        step.model.compile()
        step()  # compiling is not part of the step's memory
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    before = current_rss_bytes()
    for _ in range(spec.get("steps", 2)):
        step()
    if device.type == "cuda":
        return {"peak_bytes": torch.cuda.max_memory_allocated(device)}
    # the peak over the built model's resident size: activations, gradients, optimizer state
    return {"peak_bytes": peak_rss_bytes() - before}


if __name__ == "__main__":
    print(dumps(measure(json.loads(sys.argv[1]))))
