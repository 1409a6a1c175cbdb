"""A child process that ends with the process that started it, on Linux: it asks the kernel for a SIGTERM
when its parent dies (prctl's ``PR_SET_PDEATHSIG``), so a parent killed outright (SIGKILL, which it cannot
pass on) leaves no orphan at work. The preparation's workers and the tools' jobs both ask it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> bool:
    """Asks for a SIGTERM when the parent dies (nothing where prctl does not exist); False when ``parent``
    died already, before the request was made (the child then stops itself)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == parent
