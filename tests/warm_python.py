"""``python -m bert_exp ARGS`` (or another of bert_exp's modules) for the tests, without paying the imports each
time.

A fresh interpreter spends about 5 s importing torch and Lightning before a run starts (2026-11-28, a 2-core
AMD EPYC, Zen 4: ``import lightning`` alone 5.7 s), and the suite starts about seventy such runs from its test
workers (counted the same day on the same machine). So each test worker keeps one Python that has imported
them (the warm interpreter), and forks a child of it per run: the child takes the run's working directory,
environment (with what the imports set in it, as they do in every run), arguments and output pipes, runs
``bert_exp``'s ``__main__`` as ``python -m`` does, and exits as an interpreter does (non-daemon threads
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
import subprocess
import sys
import tempfile
from pathlib import Path

MAY_DIFFER = ("BERT_EXP_", "WANDB_", "HYDRA_FULL_ERROR", "PYTEST_CURRENT_TEST")

# The warm interpreter's loop (run with ``python -c``): requests in on fd 0, replies out on fd 1, one JSON
# line each; fds 0 and 1 are moved aside first, so that nothing a run prints reaches the protocol. It reads a
# run's output from pipes until they close, as subprocess.run does (a process the run leaves behind holding
# them keeps it waiting, and a message printed at exit is read), and it keeps the run's time limit.
SERVE = r"""
import json, os, select, signal, sys, time
requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
before = dict(os.environ)
import lightning, torch  # noqa: F401  what every run imports first
import bert_exp.runner.run  # noqa: F401  (not bert_exp.__main__: runpy runs it afresh)
added = {k: v for k, v in os.environ.items() if before.get(k) != v}  # set by the imports, as in every run
replies.write(json.dumps({"added": added}) + "\n")
replies.flush()


def child(request, stdout, stderr):
    import atexit, runpy, threading, traceback
    requests.close()
    replies.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**request["env"], **added})
    os.dup2(stdout, 1)  # under the streams the interpreter opened at start, as a fresh one's
    os.dup2(stderr, 2)
    os.close(stdout)
    os.close(stderr)
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's path first, as `python -m` does
    sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
    sys.path[0] = request["cwd"]  # as `python -m` puts the working directory first
    interrupted = False
    try:
        runpy._run_module_as_main(request["module"])  # what `python -m` calls
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
        if not isinstance(stop.code, int) and stop.code is not None:
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:
        traceback.print_exc()
        code, interrupted = 1, True
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # what the interpreter does on exit: wait for non-daemon threads,
    atexit._run_exitfuncs()  # then the atexit handlers
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        stream.flush()
    if interrupted:  # an interpreter ended by Ctrl-C ends by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def serve(request):
    (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_read)
        os.close(err_read)
        child(request, out_write, err_write)
    os.close(out_write)
    os.close(err_write)
    deadline = time.monotonic() + request["timeout"]
    output, open_ends, timed_out = {out_read: bytearray(), err_read: bytearray()}, [out_read, err_read], False
    while open_ends and not timed_out:
        ready, _, _ = select.select(open_ends, [], [], max(0.0, deadline - time.monotonic()))
        timed_out = not ready
        for fd in ready:
            data = os.read(fd, 1 << 16)
            output[fd] += data
            if not data:
                open_ends.remove(fd)
    while not timed_out:  # its output closed: wait for it to exit, within the same limit
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped:
            break
        timed_out = time.monotonic() > deadline
        time.sleep(0.01)
    if timed_out:  # as subprocess.run does: kill the run, reap it, say so
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    for fd in output:
        os.close(fd)
    for fd, path in ((out_read, request["stdout"]), (err_read, request["stderr"])):
        with open(path, "wb") as file:
            file.write(output[fd])
    return {"pid": pid, "returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}


for line in requests:
    replies.write(json.dumps(serve(json.loads(line))) + "\n")
    replies.flush()
"""


class WarmPython:
    """One warm interpreter (started on first use, ended when this process ends: its input closes)."""

    def __init__(self, cwd: Path):
        self.environment = dict(os.environ)
        self.process = subprocess.Popen([sys.executable, "-c", SERVE], cwd=cwd, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=self.environment)
        ready = self.process.stdout.readline()
        if not ready.startswith("{"):
            raise RuntimeError("the warm interpreter did not start")
        self.added = json.loads(ready)["added"]  # what its imports set, as they do in every run

    def fits(self, environment: dict) -> bool:
        return fits(self.environment, self.added, environment)

    def run(self, args: list[str], cwd: Path, environment: dict, timeout: float, module: str = "bert_exp"):
        command = [sys.executable, "-m", module, *args]
        with tempfile.TemporaryDirectory(prefix="warm_python_") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            request = {"module": module, "args": args, "cwd": str(cwd), "env": environment, "timeout": timeout,
                       "stdout": str(out), "stderr": str(err)}
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                reply = json.loads(self.process.stdout.readline())
            except BaseException:  # (an interrupted exchange leaves the protocol out of step: start again)
                self.process.kill()
                self.process.wait()
                raise
            self.last_pid = reply["pid"]
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
            if reply["timed_out"]:
                raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
            return subprocess.CompletedProcess(command, reply["returncode"], stdout, stderr)


def fits(started_in: dict, added: dict, environment: dict) -> bool:
    """Whether a run with ``environment`` is the same run forked from an interpreter started in ``started_in``
    whose imports set ``added``."""
    keys = set(environment) | set(started_in)
    return all(environment.get(k) in (started_in.get(k), added.get(k, started_in.get(k)))
               for k in keys if not k.startswith(MAY_DIFFER))


_warm: WarmPython | None = None


def run_module(args: list[str], cwd: Path, environment: dict, timeout: float, fresh: bool = False,
               module: str = "bert_exp"):
    """``python -m MODULE ARGS`` in ``cwd`` with ``environment``: forked from the warm interpreter where
    that is the same run, else in a fresh interpreter."""
    global _warm
    if not fresh and not environment.get("BERT_EXP_TEST_FRESH_PYTHON"):
        alive = _warm is not None and _warm.process.poll() is None
        # The worker's own environment changed (a test set a variable in-process): a warm interpreter of the
        # new one, not fresh runs for the rest of the worker; unless this run fits the one there is, or would
        # not fit the new one either.
        if (alive and not _warm.fits(environment) and not _warm.fits(dict(os.environ))
                and fits(dict(os.environ), _warm.added, environment)):
            _warm.process.stdin.close()
            _warm.process.wait()
            alive = False
        if not alive:  # (or ended: killed after an interrupted exchange)
            _warm = WarmPython(cwd)
        if _warm.fits(environment):
            return _warm.run(args, cwd, environment, timeout, module)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment)
