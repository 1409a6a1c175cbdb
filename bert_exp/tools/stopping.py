"""SIGTERM and Ctrl-C in the tools that predict (``score``, ``glue --submission``): the work stops where it
is, what was half-written is removed on the way out, and the process ends with 128 + the signal's number
(143, 130), as a stopped ``fit`` does. Without this Lightning's predict loop keeps SIGTERM for a fit it
is not running (the loop runs on and exits 0) and turns Ctrl-C into exit code 1."""

from __future__ import annotations

import signal
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """Raised where the signal lands: not an Exception, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum, self.code = signum, 128 + signum


@contextmanager
def stop_on_signals():
    def stop(signum, frame):
        for s in SIGNALS:  # a second signal must not interrupt the clean-up the first one starts
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
