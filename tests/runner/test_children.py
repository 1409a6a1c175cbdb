"""A pipeline stage or suite job runs as a child process; a stop must reach it and let it save.

The child here stands in for a run: on SIGINT or SIGTERM it takes a second (a step to finish, a
checkpoint to write), records that it saved, and exits with 128 + the signal, as GracefulStop does."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import REPO

CHILD = textwrap.dedent("""
    import os, pathlib, signal, sys, time
    out = pathlib.Path(sys.argv[1])
    out.with_suffix(".pid").write_text(str(os.getpid()))
    def stop(signum, frame):
        time.sleep(1.0)
        out.write_text(f"saved after signal {signum}")
        sys.exit(128 + signum)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    out.write_text("ready")
    while True:
        time.sleep(0.05)
""")
PARENT = "import sys; from bert_exp.runner.children import run_child; sys.exit(run_child(sys.argv[1:]))"


def start(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    out = tmp_path / "out.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(tmp_path / "parent.err", "w") as err:  # a file, not a pipe: an orphaned child would hold a pipe open
        parent = subprocess.Popen([sys.executable, "-c", PARENT, sys.executable, str(tmp_path / "child.py"), str(out)],
                                  env=env, start_new_session=True, stderr=err)
    deadline = time.time() + 60
    while not (out.exists() and out.read_text() == "ready"):
        assert parent.poll() is None and time.time() < deadline, (tmp_path / "parent.err").read_text()
        time.sleep(0.05)
    return parent, out


def kill_child(out):
    """After the test, whatever happened: a child left running would train on as an orphan."""
    try:
        os.kill(int(out.with_suffix(".pid").read_text()), signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass


@pytest.mark.parametrize("how", ["ctrl-c to the process group", "sigterm to the parent alone"])
def test_a_stop_waits_for_the_child_to_save_and_ends_with_its_code(tmp_path, how):
    parent, out = start(tmp_path)
    try:
        if how.startswith("ctrl-c"):  # what a terminal does: the signal goes to every process in the group
            os.killpg(parent.pid, signal.SIGINT)
            expected = signal.SIGINT
        else:  # kill PID, or a container's stop: the parent only, which passes it on
            parent.send_signal(signal.SIGTERM)
            expected = signal.SIGTERM
        code = parent.wait(timeout=60)
        errors = (tmp_path / "parent.err").read_text()
        assert out.read_text() == f"saved after signal {int(expected)}", errors
        assert code == 128 + expected and "Traceback" not in errors
    finally:
        kill_child(out)
