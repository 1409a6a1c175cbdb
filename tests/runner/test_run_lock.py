"""Run directories that cannot collide: a lock with the writer's pid taken before Hydra writes anything,
a killed run recognised as killed, its half-written files removed when the directory is used again, and
failures recorded in run.json."""

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import bert_exp.runner.resolvers  # noqa: F401
import bert_exp.runner.run as runner
from bert_exp.resources import resource_dir
from bert_exp.runner.guard import check_run
from bert_exp.runner.run_dir import LOCK_NAME, RunLock, partial_files, read_lock, run_state
from bert_exp.runner.validation import ConfigError
from bert_exp.tools import info as info_tool
from bert_exp.tools.report import report
from tests.helpers import compose_config, run_cli


def hydra_config(overrides, run_dir):
    """The config Hydra hands its callbacks (hydra.* included), as `python -m bert_exp OVERRIDES` makes it."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        return compose("config", overrides=[*overrides, f"hydra.run.dir={run_dir}"], return_hydra_config=True)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def snapshot(directory):
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in directory.rglob("*") if p.is_file()}


@pytest.fixture(autouse=True)
def _release_locks():
    yield
    RunLock.release_all()


def test_a_live_directory_is_refused_with_its_holders_pid_and_nothing_touched(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / LOCK_NAME).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        (run_dir / ".hydra").mkdir()
        (run_dir / ".hydra" / "config.yaml").write_text("theirs")
        before = snapshot(run_dir)
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            check_run(hydra_config(["+experiment=pretrain_tiny", "resume_in_place=true"], run_dir))
        assert snapshot(run_dir) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_config_error_creates_no_directory(tmp_path):
    with pytest.raises(ConfigError, match="optim.optimizer.lr"):
        check_run(hydra_config(["+experiment=pretrain_tiny", "optim.optimizer.lr=-1"], tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_the_lock_holds_this_process_and_goes_when_released(tmp_path):
    check_run(hydra_config(["+experiment=pretrain_tiny"], tmp_path / "run"))
    assert read_lock(tmp_path / "run") == {"pid": os.getpid(), "host": socket.gethostname()}
    RunLock.release_all()
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_an_output_directory_that_is_a_file_or_read_only_is_one_message(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        check_run(hydra_config(["+experiment=pretrain_tiny"], tmp_path / "file"))
    with pytest.raises(ConfigError, match="(?i)is a file|not a directory"):
        check_run(hydra_config(["+experiment=pretrain_tiny"], tmp_path / "file" / "run"))
    (tmp_path / "ro").mkdir(mode=0o555)
    if os.geteuid() == 0:  # root writes anywhere: the refusal a user gets, simulated
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(ConfigError, match="hydra.run.dir=.*ro/run.*Permission denied"):
        check_run(hydra_config(["+experiment=pretrain_tiny"], tmp_path / "ro" / "run"))


def test_a_full_disk_is_refused_before_work(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 0))
    with pytest.raises(ConfigError, match="disk .* is full"):
        check_run(hydra_config(["+experiment=pretrain_tiny"], tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def killed_run(run_dir, step=7):
    """What SIGKILL leaves: run.json saying running, the dead process's lock, half-written files."""
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "run.json").write_text(json.dumps({"status": "running", "experiment": "pretrain_tiny",
                                                  "task": "pretraining", "overrides": []}))
    (run_dir / LOCK_NAME).write_text(json.dumps({"pid": dead_pid(), "host": socket.gethostname()}))
    (run_dir / "logs" / "metrics.csv").write_text(f"epoch,step,train/loss\n0,4,9.5\n0,{step},9.0\n")
    (run_dir / ".run.json.partial").write_text('{"status": "fin')
    (run_dir / "checkpoints" / ".last.ckpt.partial").write_bytes(b"half")


def test_a_killed_run_is_named_killed_at_its_step_by_info_and_report(tmp_path, capsys):
    run_dir = tmp_path / "run"
    killed_run(run_dir)
    assert run_state(run_dir) == "killed at step 7"
    assert info_tool.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "killed at step 7" in out and "half-written" in out
    assert "status: killed at step 7" in report(run_dir).read_text()
    assert "  resume  " not in out  # no last.ckpt saved: nothing to resume from


def test_info_gives_a_killed_runs_resume_command(tmp_path, capsys):
    """After SIGKILL the run printed nothing; info says how to continue it from its last.ckpt."""
    run_dir = tmp_path / "run"
    killed_run(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**info, "overrides": ["+experiment=pretrain_tiny", "seed=3"]}))
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    assert info_tool.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"resume      python -m bert_exp +experiment=pretrain_tiny seed=3 ckpt_path={run_dir}" in out


def test_a_killed_runs_lock_is_taken_over_and_its_partial_files_removed(tmp_path):
    run_dir = tmp_path / "run"
    killed_run(run_dir)
    assert len(partial_files(run_dir)) == 2
    # a sweep job or pipeline stage run again continues it in place
    check_run(hydra_config(["+experiment=pretrain_tiny", "resume_in_place=true"], run_dir))
    assert partial_files(run_dir) == [] and read_lock(run_dir)["pid"] == os.getpid()
    assert run_state(run_dir) == "running"  # its own process holds it now


def test_a_crash_before_the_record_leaves_a_failed_run_json_and_the_traceback_in_the_log(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    cfg = compose_config(["+experiment=pretrain_tiny", "logger=csv"], run_dir=run_dir)

    def crash(*args, **kwargs):
        raise RuntimeError("the corpus reader broke")

    monkeypatch.setattr(runner, "build_data", crash)
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    logging.getLogger().addHandler(handler)
    try:
        with pytest.raises(RuntimeError):
            runner.run(cfg)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["global_step"] == 0
    assert info["error"] == {"type": "RuntimeError", "message": "the corpus reader broke", "step": 0}
    assert "Traceback" in log_file.read_text() and "in crash" in log_file.read_text()
    assert not (run_dir / LOCK_NAME).exists()


def test_a_user_error_before_any_work_leaves_no_directory(tmp_path, monkeypatch):
    from bert_exp.data.loading import DataFileError

    run_dir = tmp_path / "run"
    cfg = compose_config(["+experiment=pretrain_tiny", "logger=csv"], run_dir=run_dir)

    def missing(*args, **kwargs):
        raise DataFileError("corpus/x.txt: no such file")

    monkeypatch.setattr(runner, "build_data", missing)
    with pytest.raises(DataFileError):
        runner.run(cfg)
    assert not run_dir.exists()


def test_refused_reuse_touches_no_file_of_the_existing_run(tmp_path):
    """Hydra writes .hydra/ and the job log before the task runs: the refusal comes first."""
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    for name, text in {".hydra/config.yaml": "a", ".hydra/hydra.yaml": "b", ".hydra/overrides.yaml": "c",
                       "bert_exp.log": "their log", "run.json": '{"status": "finished"}'}.items():
        (run_dir / name).write_text(text)
    before = snapshot(run_dir)
    result = run_cli(["+experiment=pretrain_tiny", f"hydra.run.dir={run_dir}"])
    assert result.returncode == 2, result.stderr
    assert "already holds a run" in result.stderr and "Traceback" not in result.stderr
    assert snapshot(run_dir) == before
    bad = run_cli(["+experiment=pretrain_tiny", "optim.optimizer.lr=0", f"hydra.run.dir={tmp_path / 'new'}"])
    assert bad.returncode == 2 and "optim.optimizer.lr=0" in bad.stderr
    assert not (tmp_path / "new").exists()
