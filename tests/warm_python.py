"""``python -m bert_exp ARGS`` for the tests, without paying the imports each time.

A fresh interpreter spends about 5 s importing torch and Lightning before a run starts (2026-11-28, a
2-core AMD EPYC, Zen 4: ``import lightning`` alone 5.7 s), and the suite starts about a hundred such runs.
So each test worker keeps one Python that has imported them (the warm interpreter), and forks a child of
it per run: the child takes the run's working directory, environment, arguments and output files, runs
``bert_exp``'s ``__main__`` as ``python -m`` would, and exits as an interpreter does (non-daemon threads
joined, atexit handlers run, output flushed).

What a fork cannot give, a fresh interpreter gives instead (``run_module`` decides):
- an environment that differs from the warm interpreter's in anything the imports may have read already
  (thread counts, CPU capability, Hugging Face endpoints, ...): only ``BERT_EXP_*``, ``WANDB_*`` (W&B is
  imported by a run, not before), ``HYDRA_FULL_ERROR`` and ``PYTEST_CURRENT_TEST`` may differ;
- ``fresh=True``, for tests that compare runs of separate interpreters (each child of one warm interpreter
  shares its string-hash seed);
- ``BERT_EXP_TEST_FRESH_PYTHON=1`` in the environment: every run fresh, as before.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

MAY_DIFFER = ("BERT_EXP_", "WANDB_", "HYDRA_FULL_ERROR", "PYTEST_CURRENT_TEST")

# The warm interpreter's loop (run with ``python -c``): requests in on fd 0, replies out on fd 1, one JSON
# line each; fds 0 and 1 are moved aside first, so that nothing a child prints reaches the protocol.
SERVE = r'''
import json, os, sys
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
import lightning, torch  # noqa: F401  what every run imports first
import bert_exp.runner.run  # noqa: F401  (not bert_exp.__main__: runpy runs it afresh)
replies.write("ready\n")
replies.flush()


def child(request):
    import atexit, runpy, threading, traceback
    requests.close()
    replies.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1,
                                       closefd=False)
    sys.argv = ["-m", *request["args"]]
    sys.orig_argv = [sys.executable, "-m", "bert_exp", *request["args"]]
    sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
    try:
        runpy.run_module("bert_exp", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # what the interpreter does on exit: wait for non-daemon threads,
    atexit._run_exitfuncs()  # then the atexit handlers
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
    replies.flush()
'''


class WarmPython:
    """One warm interpreter (started on first use, ended when this process ends: its input closes)."""

    def __init__(self, cwd: Path):
        self.environment = dict(os.environ)
        self.process = subprocess.Popen([sys.executable, "-c", SERVE], cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=self.environment)
        if self.process.stdout.readline() != "ready\n":
            raise RuntimeError("the warm interpreter did not start")

    def fits(self, environment: dict) -> bool:
        keys = set(environment) | set(self.environment)
        return all(environment.get(k) == self.environment.get(k) for k in keys if not k.startswith(MAY_DIFFER))

    def run(self, args: list[str], cwd: Path, environment: dict, timeout: float):
        with tempfile.TemporaryDirectory(prefix="warm_python_") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            request = {"args": args, "cwd": str(cwd), "env": environment, "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            pid = self.last_pid = json.loads(self.process.stdout.readline())["pid"]
            ready, _, _ = select.select([self.process.stdout], [], [], timeout)
            if not ready:  # as subprocess.run does: kill the run, then say so
                os.kill(pid, signal.SIGKILL)
                self.process.stdout.readline()
                raise subprocess.TimeoutExpired([sys.executable, "-m", "bert_exp", *args], timeout,
                                                out.read_text(errors="replace"), err.read_text(errors="replace"))
            returncode = json.loads(self.process.stdout.readline())["returncode"]
            return subprocess.CompletedProcess([sys.executable, "-m", "bert_exp", *args], returncode,
                                               out.read_text(errors="replace"), err.read_text(errors="replace"))


_warm: WarmPython | None = None


def run_module(args: list[str], cwd: Path, environment: dict, timeout: float, fresh: bool = False):
    """``python -m bert_exp ARGS`` in ``cwd`` with ``environment``: forked from the warm interpreter where
    that is the same run, else in a fresh interpreter."""
    global _warm
    if not fresh and not environment.get("BERT_EXP_TEST_FRESH_PYTHON"):
        if _warm is None or _warm.process.poll() is not None:
            _warm = WarmPython(cwd)
        if _warm.fits(environment):
            return _warm.run(args, cwd, environment, timeout)
    return subprocess.run([sys.executable, "-m", "bert_exp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment)
