"""Keep freed memory in the process, so a CPU training step does not fault in fresh pages every time.

glibc's malloc serves every block above its mmap threshold (which it never raises past 32 MiB) with a
fresh ``mmap`` and gives it back with ``munmap`` when it is freed. A training step allocates and frees
the same large tensors each time (BERT-base: the word embeddings' bf16 copy and gradient, 94 MB in
fp32; the MLM logits; [tokens, 3072] activations), so every step pays the kernel for zeroing those
pages again. The usual cure is to preload jemalloc or tcmalloc (``torch.backends.xeon.run_cpu`` does);
without either installed, two ``mallopt`` settings do it: no mmap for allocations (``M_MMAP_MAX=0``)
and a trim threshold of 2 GiB (``M_TRIM_THRESHOLD``), so freed blocks stay in the heap for the next
step. Measured on the 2-core CPU: ``pretrain_budget`` ran 8.4-8.6k tokens/s with glibc's defaults and
10.1k with the heap kept (README, "Speed against transformers"). The cost is resident memory that
stays near its peak. The settings hold for the whole process (and the processes it forks).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_MAX = -4
GLIBC_DEFAULTS = {M_TRIM_THRESHOLD: 128 * 1024, M_MMAP_MAX: 65536}
KEPT = {M_TRIM_THRESHOLD: 2**31 - 1, M_MMAP_MAX: 0}
CHOICES = ("keep_freed", "system")
_kept = False  # keep_freed applied in this process


def glibc():
    """The C library when it is glibc (mallopt with glibc's parameters), else None (macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
    except (OSError, AttributeError):
        return None
    return libc


def configure_cpu_allocator(choice: str) -> bool:
    """``keep_freed``: the settings above; ``system``: the C library's defaults (glibc's default values
    put back if keep_freed was applied earlier in this process, as by an earlier job of a multirun).
    True when keep_freed is in force afterwards."""
    global _kept
    if choice not in CHOICES:
        raise ValueError(f"cpu_allocator={choice!r}: expected one of {CHOICES}")
    libc = glibc()
    if libc is None:
        log.debug("cpu_allocator=%s: not glibc, malloc left as it is", choice)
        return False
    if choice == "system":
        if _kept:
            for param, value in GLIBC_DEFAULTS.items():
                libc.mallopt(param, value)
            _kept = False
        return False
    _kept = all(libc.mallopt(param, value) == 1 for param, value in KEPT.items())
    return _kept

