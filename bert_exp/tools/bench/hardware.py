"""What the device can do: the measured matmul peak, and counting a step's FLOPs and peak memory."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

# shapes of BERT's own products (tokens x hidden x 4*hidden) and a large square one; the best is the peak.
# On a GPU the peak quoted is an 8192-cube product's (a 4096 cube is over before the clocks settle); on a
# CPU that one would take seconds a call
PEAK_SHAPES = ((4096, 768, 3072), (4096, 3072, 768), (4096, 4096, 4096))
GPU_PEAK_SHAPES = ((8192, 8192, 8192),)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn: Callable[[], object], device: torch.device, repeats: int = 5) -> float:
    """One untimed call, then the median of ``repeats`` timed ones (single timings scatter widely on a
    shared CPU)."""
    fn()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def matmul_peak(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> float:
    """FLOP/s of plain matrix products of ``dtype`` on ``device``, the best shape's."""
    best = 0.0
    shapes, repeats = (GPU_PEAK_SHAPES, max(repeats, 20)) if device.type == "cuda" else (PEAK_SHAPES, repeats)
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        best = max(best, 2 * m * k * n / median_seconds(lambda: a @ b, device, repeats))
    return best


def count_flops(step: Callable[[], object]) -> int:
    """FLOPs of one call of ``step`` as torch executes it (matrix products, forward and backward): a
    sparse MLM head counts only the positions it scores."""
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak resident memory: VmHWM, which belongs to the process image (getrusage's
    ru_maxrss would carry the parent's peak over a fork and exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_isolated(module: str, spec: dict) -> dict:
    """Runs ``python -m module JSON`` and returns the JSON it prints last: peak memory must be taken in a
    fresh process, since the allocator keeps what another model freed."""
    done = subprocess.run([sys.executable, "-m", module, json.dumps(spec)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{module} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_steps(step, steps: int, device: torch.device) -> float:
    """Seconds a call of ``step``, over ``steps`` calls."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps
