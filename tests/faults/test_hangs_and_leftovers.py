"""Faults that once hung a run or left files behind for ever. A damaged chunk read by two loader workers,
a worker failing with an error that is not ours, a worker killed: each run ends (the damaged chunk in one
line, exit 2), its workers with it, though they ignore SIGTERM. A shared (``across_nodes``) preparation
killed with its whole process group: the next preparation removes the scratch directory it left, and
never a live process's or another host's."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from run_faults import BASE, REPO, environment

# seconds: a run that fails in its first step ends in about 10-20 here (2 busy cores), or it hangs for ever
RUN_LIMIT = 240
SMALL_CHUNKS = ["data.prepare.chunk_bytes=32KB"]  # several chunks: each of two loader workers reads some
TWO_WORKERS = ["data.loader.num_workers=2", *SMALL_CHUNKS]


def group_members(group: int) -> list[int]:
    """The processes of process group ``group`` still alive (a zombie is gone, only not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, _, pgrp = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            except (OSError, IndexError, ValueError):
                continue
            if int(pgrp) == group and state != "Z":
                found.append(int(entry.name))
    return found


def run_alone(run_dir: Path, cache: Path, *extra: str, limit: float = RUN_LIMIT) -> tuple[int, str, str]:
    """``python -m bert_exp`` in a process group of its own, stopped (and the test failed) if it has not
    ended within ``limit`` seconds; then no process of its group may be left. Returns (exit code, stdout,
    stderr)."""
    keys = {a.lstrip("+").split("=", 1)[0] for a in extra}
    args = [a for a in BASE if a.lstrip("+").split("=", 1)[0] not in keys] + list(extra)
    env = {**environment(), "BERT_EXP_CACHE": str(cache)}
    proc = subprocess.Popen([sys.executable, "-m", "bert_exp", *args, f"hydra.run.dir={run_dir}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the run did not end within {limit} s (a hang): {err[-2000:]}")
    deadline = time.time() + 15  # what ends with the run (multiprocessing's resource tracker) takes a moment
    while group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    left = group_members(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes of the run left behind: {left}"
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def prepared(data_dir, tmp_path_factory):
    """A cache with the vocabulary and the prepared data of the runs below (chunks small enough for each
    of two workers to read some), made once by a run of one step."""
    cache = tmp_path_factory.mktemp("prepared_cache")
    code, _, err = run_alone(cache.parent / "preparing_run", cache, "trainer.max_steps=1", *SMALL_CHUNKS, limit=600)
    assert code == 0, err[-3000:]
    return cache


def own_cache(prepared: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(prepared, cache)
    return cache


@pytest.mark.slow
def test_a_damaged_chunk_read_by_two_loader_workers_is_one_line_and_the_run_ends(prepared, tmp_path):
    """Token ids outside the vocabulary, written after setup() checked the chunks' sha256, reach the
    workers' check of each item: one line naming the chunk, exit 2, no worker left (they ignore SIGTERM,
    with which PyTorch and multiprocessing end them: the run used to wait for them for ever)."""
    run_dir = tmp_path / "run"
    code, _, err = run_alone(run_dir, own_cache(prepared, tmp_path), *TWO_WORKERS,
                             "+callbacks.fault={_target_:inject.DamageChunks}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith("error: ") and "/train/chunk-" in lines[0], lines[0]
    assert ": token id 65535 outside the vocabulary of 2000: the chunk is damaged" in lines[0]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and f"error: {info['error']['message']}" == lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("kind, message", [("raise", "injected failure in loader worker 0"),
                                           ("kill", "DataLoader worker (pid(s) ")])
def test_a_worker_failing_otherwise_ends_the_run_and_its_workers(prepared, tmp_path, kind, message):
    """Worker 0 raises an error that is not ours (a RuntimeError), or is killed (SIGKILL), while worker 1
    goes on: the run fails (exit 1, its traceback), ends, and leaves no worker."""
    run_dir = tmp_path / "run"
    code, _, err = run_alone(run_dir, own_cache(prepared, tmp_path), *TWO_WORKERS,
                             f"+callbacks.fault={{_target_:inject.WorkerFault,kind:{kind},item:1}}")
    assert code == 1 and message in err, err[-3000:]
    assert json.loads((run_dir / "run.json").read_text())["status"] == "failed"


def shared_preparation(data_dir, tmp_path):
    """A preparation into the directory ``shared`` that the nodes share (``across_nodes``), of 8 groups of
    about 100 KB: each takes long enough (about half a second) to be caught while a worker writes it."""
    from bert_exp.data import InstanceSettings, PretrainingDataModule, TokenizerSpec
    from bert_exp.data.corpus.preparation import PrepareSettings

    return PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                 tokenizer=TokenizerSpec(vocab_size=1000), cache_dir=str(tmp_path / "cache"),
                                 instances=InstanceSettings(max_seq_length=64, doc_boundary="blank_line"),
                                 prepare=PrepareSettings(dir=str(tmp_path / "shared"), across_nodes=True, num_workers=1,
                                                         group_bytes="100KB", evaluation_sets=[]))


PREPARE_SHARED = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_hangs_and_leftovers import shared_preparation
shared_preparation(Path(sys.argv[1]), Path(sys.argv[2])).prepare_data()
"""


def test_a_shared_preparation_killed_with_its_group_leaves_no_scratch_after_the_next(data_dir, tmp_path):
    """SIGKILL to the whole process group (the preparing process and its workers, so none cleans up)
    half-way through preparing into a shared directory: its ``.scratch-<host>-<pid>.*`` stays until the
    next preparation, which removes it and finishes the data; a live process's scratch and another
    host's are kept."""
    shared = tmp_path / "shared"
    proc = subprocess.Popen([sys.executable, "-c", PREPARE_SHARED, str(data_dir), str(tmp_path)], cwd=REPO,
                            env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.time() + 120
    while not list(shared.glob("*/.scratch-*/*")):  # a worker is writing a group in it
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, "the preparation never started writing"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    deadline = time.time() + 15
    while group_members(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert group_members(proc.pid) == []
    [killed] = shared.glob("*/.scratch-*")
    host = socket.gethostname()
    assert killed.name.startswith(f".scratch-{host}-{proc.pid}.")
    location = killed.parent
    assert not (location / "meta.json").exists()  # killed before it completed
    live = location / f".scratch-{host}-{os.getpid()}.x1"  # this test's own process: alive
    elsewhere = location / f".scratch-not-{host}-{proc.pid}.x2"  # another host's (its pid is gone here)
    for kept in (live, elsewhere):
        kept.mkdir()
        (kept / "chunk-0-0.bin").write_bytes(b"in use")
    again = shared_preparation(data_dir, tmp_path)  # the next preparation, here
    again.prepare_data()
    assert Path(again.prepared_location.url) == location and (location / "meta.json").is_file()
    assert sorted(p.name for p in location.glob(".scratch-*")) == sorted([live.name, elsewhere.name])
    assert (live / "chunk-0-0.bin").read_bytes() == b"in use"


def test_an_object_stores_scratch_left_in_the_temporary_directory_is_removed_the_same_way(tmp_path, monkeypatch):
    """For an object store the chunks are written in the system's temporary directory first: what a
    killed preparation of this host left there goes at the next preparation, a live process's stays."""
    from bert_exp.data.corpus import preparation
    from bert_exp.data.corpus.storage import Location

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    host = socket.gethostname()
    dead = tmp_path / f"bert_exp-prepare-{host}-{gone.pid}.a1"
    live = tmp_path / f"bert_exp-prepare-{host}-{os.getpid()}.b2"  # this test's own process
    for directory in (dead, live):
        (directory / "train-000000").mkdir(parents=True)
    preparation._remove_stale_scratch(Location("s3://bucket/prepared/0123456789abcdef"))
    assert not dead.exists() and live.is_dir()
