"""Waiting for another process of a run (the first process's vocabulary, another node's share of the
prepared data): polled, with a note every minute, a check that the awaited process has not failed,
and a time limit that ends in one line naming what was awaited."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .errors import UserError

log = logging.getLogger("bert_exp")

POLL_SECONDS = 0.5


class WaitTimeout(UserError, TimeoutError):
    """What a process waited for did not come within the time limit."""


def wait_for(ready: Callable[[], bool], what: str, timeout_s: float, check: Callable[[], None] | None = None,
             poll_s: float = POLL_SECONDS, setting: str = "data.prepare.wait_minutes") -> None:
    """Returns once ``ready()``; ``check()`` raises if what is awaited can no longer come (its process
    failed). After ``timeout_s`` seconds: :class:`WaitTimeout`, naming ``what`` and the ``setting`` that
    sets the limit."""
    if ready():
        return
    log.info("waiting for %s", what)
    started = time.monotonic()
    next_note = started + 60
    while not ready():
        if check is not None:
            check()
        now = time.monotonic()
        if now - started > timeout_s:
            raise WaitTimeout(f"gave up after {timeout_s / 60:.1f} min waiting for {what} ({setting} sets the limit)")
        if now > next_note:
            log.info("still waiting for %s (%.0f s)", what, now - started)
            next_note += 60
        time.sleep(poll_s)
