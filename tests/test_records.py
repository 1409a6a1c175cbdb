"""Every JSON file we write is strict JSON: non-finite floats become null, with the reason beside."""

import json
import math

import pytest

from bert_exp.records import dumps, write_json


def test_non_finite_values_become_null_with_the_reason_beside(tmp_path):
    info = {"status": "diverged", "best_score": math.inf, "metrics": {"train/loss": math.nan, "lr": 1e-3},
            "history": [1.0, -math.inf]}
    path = write_json(tmp_path / "run.json", info, indent=2)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    loaded = json.loads(text, parse_constant=lambda name: pytest.fail(f"bare {name}"))
    assert loaded["best_score"] is None and loaded["metrics"] == {"train/loss": None, "lr": 1e-3}
    assert loaded["history"] == [1.0, None]
    assert loaded["non_finite"] == {"best_score": "inf", "metrics.train/loss": "nan", "history[1]": "-inf"}
    assert info["best_score"] == math.inf  # the caller's object is left alone
    assert not list(tmp_path.glob(".*partial"))


def test_finite_documents_are_unchanged():
    assert json.loads(dumps({"a": 1.5, "b": [None, "x"]})) == {"a": 1.5, "b": [None, "x"]}
    assert dumps([math.nan]) == "[null]"


def _write_many(path, marker, count):
    for i in range(count):
        write_json(path, {"writer": marker, "i": i})


def test_two_processes_writing_one_file_never_fail(tmp_path):
    """Each writer has its own temporary name (a fixed one failed 153 times in 3,000 with two writers)."""
    import multiprocessing

    path = tmp_path / "memo.json"
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_write_many, args=(path, n, 400)) for n in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    assert [w.exitcode for w in writers] == [0, 0]
    assert json.loads(path.read_text())["i"] == 399 and not list(tmp_path.glob(".*partial"))


def test_written_files_follow_the_umask(tmp_path):
    import os
    import stat

    old = os.umask(0o002)
    try:
        path = write_json(tmp_path / "shared.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o664  # group-writable, as on a shared file system
