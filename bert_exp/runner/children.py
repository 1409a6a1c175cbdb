"""Runs one job as a child process (a pipeline stage, a suite job) so that a stop reaches it intact.

``subprocess.call`` is not enough: on Ctrl-C it waits a quarter of a second for the child and then kills
it (SIGKILL), before the child's own handler has finished its step and saved ``last.ckpt``; and a
SIGTERM sent to the parent alone ends the parent and leaves the child training as an orphan, which holds
its directory's lock. Here the parent ignores SIGINT while the child runs (Ctrl-C reaches the child
from the terminal, as it reaches the whole process group), passes SIGTERM on, and returns the child's
exit code once it has ended: 130 or 143 after a stop, with its work saved. A parent killed outright
(SIGKILL, which it cannot pass on) takes the child with it: on Linux the child is asked for a SIGTERM when
its parent dies (prctl's PR_SET_PDEATHSIG), so it saves and stops instead of training on as an orphan."""

from __future__ import annotations

import os
import signal
import subprocess

from ..orphans import die_with_parent

INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM)


def _stop_with_parent(parent: int):
    """The child's step before it execs: a SIGTERM when the parent dies (a parent gone already: stop now)."""
    def set_death_signal():
        if not die_with_parent(parent):
            os.kill(os.getpid(), signal.SIGTERM)
    return set_death_signal


def run_child(command: list[str]) -> int:
    """Runs ``command`` to its end and returns its exit code, passing a SIGTERM on to it."""
    child = subprocess.Popen(command, preexec_fn=_stop_with_parent(os.getpid()))

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
