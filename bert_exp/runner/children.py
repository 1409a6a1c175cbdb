"""Runs one job as a child process (a pipeline stage, a suite job) so that a stop reaches it intact.

``subprocess.call`` is not enough: on Ctrl-C it waits a quarter of a second for the child and then kills
it (SIGKILL), before the child's own handler has finished its step and saved ``last.ckpt``; and a
SIGTERM sent to the parent alone ends the parent and leaves the child training as an orphan, which holds
its directory's lock. Here the parent ignores SIGINT while the child runs (Ctrl-C reaches the child
from the terminal, as it reaches the whole process group), passes SIGTERM on, and returns the child's
exit code once it has ended: 130 or 143 after a stop, with its work saved."""

from __future__ import annotations

import signal
import subprocess

INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def run_child(command: list[str]) -> int:
    """Runs ``command`` to its end and returns its exit code, passing a SIGTERM on to it."""
    child = subprocess.Popen(command)

    def forward(signum, frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                signal.SIGTERM: signal.signal(signal.SIGTERM, forward)}
    try:
        return child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
