"""A run directory's life (fresh, finished and skipped, interrupted and resumed in place, another job's),
and the environment each job of a multirun starts from."""

import json
import os

import pytest
import torch
import torch.distributed as dist

import bert_exp.runner.run_dir as jobs
from bert_exp.runner.validation import ConfigError
from bert_exp.runner.run_dir import JobDirectory, sweep_job_environment

OVERRIDES = ["+experiment=pretrain_tiny", "seed=1"]


def write_run(run_dir, status, overrides=OVERRIDES, checkpoint=True):
    (run_dir / "checkpoints").mkdir(parents=True)
    if checkpoint:
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    (run_dir / "run.json").write_text(json.dumps({"status": status, "overrides": overrides, "wandb_id": "w1"}))


def test_a_fresh_directory_starts_a_fresh_run(tmp_path):
    for in_place in (False, True):
        job = JobDirectory.inspect(tmp_path / "new", OVERRIDES, in_place)
        assert (job.finished, job.resume_from, job.previous) == (None, None, None)


def test_a_finished_job_is_skipped_and_an_interrupted_one_resumed_in_place(tmp_path):
    write_run(tmp_path / "done", "finished")
    assert JobDirectory.inspect(tmp_path / "done", OVERRIDES, True).finished["wandb_id"] == "w1"
    write_run(tmp_path / "killed", "running")
    job = JobDirectory.inspect(tmp_path / "killed", OVERRIDES, True)
    assert job.finished is None and job.resume_from == tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert job.previous["wandb_id"] == "w1"  # the W&B run continues
    write_run(tmp_path / "early", "running", checkpoint=False)  # killed before its first checkpoint
    assert JobDirectory.inspect(tmp_path / "early", OVERRIDES, True).resume_from is None


def test_another_jobs_directory_is_never_reused(tmp_path):
    write_run(tmp_path / "other", "running", overrides=["+experiment=pretrain_tiny", "seed=2"])
    with pytest.raises(ConfigError, match="holds another job"):
        JobDirectory.inspect(tmp_path / "other", OVERRIDES, True)
    write_run(tmp_path / "run", "finished")
    with pytest.raises(ConfigError, match="already holds a run"):  # a plain run never continues in place
        JobDirectory.inspect(tmp_path / "run", OVERRIDES, False)


def test_a_finished_job_counts_only_for_the_same_job_from_the_same_weights(tmp_path):
    """What a pipeline or the suite skips: a finished job with the same overrides whose starting weights
    are unchanged. Another job's directory, or weights written again under the same path, is refused
    rather than lending its old score to the new job."""
    assert jobs.finished_job(tmp_path / "none", OVERRIDES) is None
    write_run(tmp_path / "running", "running")
    assert jobs.finished_job(tmp_path / "running", OVERRIDES) is None  # to continue, not to skip
    write_run(tmp_path / "done", "finished")
    assert jobs.finished_job(tmp_path / "done", OVERRIDES)["status"] == "finished"
    with pytest.raises(ConfigError, match="holds another job"):
        jobs.finished_job(tmp_path / "done", ["+experiment=pretrain_tiny", "seed=2"])

    weights = tmp_path / "hf" / "model.safetensors"  # a HuggingFace directory: its weights file is compared
    weights.parent.mkdir()
    weights.write_bytes(b"first")
    write_run(tmp_path / "tuned", "finished")
    info = json.loads((tmp_path / "tuned" / "run.json").read_text())
    info.update(initialised_from=str(weights.parent), initialised_from_sha256=jobs.weights_sha256(weights.parent))
    (tmp_path / "tuned" / "run.json").write_text(json.dumps(info))
    assert jobs.finished_job(tmp_path / "tuned", OVERRIDES)["status"] == "finished"
    weights.write_bytes(b"second")
    with pytest.raises(ConfigError, match="weights have changed"):
        jobs.finished_job(tmp_path / "tuned", OVERRIDES)
    with pytest.raises(ConfigError, match="weights have changed"):  # nor continued, when interrupted
        JobDirectory.inspect(tmp_path / "tuned", OVERRIDES, True)
    assert jobs.weights_sha256(tmp_path / "nothing") is None


def test_each_multirun_job_starts_from_the_environment_the_sweep_started_with(monkeypatch, tmp_path):
    """What a DDP job leaves behind in the sweep's process (launch variables, a cut thread count, an
    open process group) is gone before the next job."""
    monkeypatch.setattr(jobs, "is_multirun", lambda: True)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    threads = torch.get_num_threads()
    with sweep_job_environment():
        os.environ.update(LOCAL_RANK="0", OMP_NUM_THREADS="1", MASTER_PORT="29511")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    assert "LOCAL_RANK" not in os.environ and "MASTER_PORT" not in os.environ
    assert os.environ["OMP_NUM_THREADS"] == "2" and torch.get_num_threads() == threads
    assert not dist.is_initialized()


@pytest.mark.parametrize("variables, first", [
    ({}, True),
    ({"RANK": "0", "LOCAL_RANK": "0"}, True),
    ({"RANK": "8", "LOCAL_RANK": "0"}, False),  # torchrun, the second node's first process
    ({"LOCAL_RANK": "1", "SLURM_PROCID": "0"}, False),  # started by Lightning inside an interactive allocation
    ({"LOCAL_RANK": "0", "NODE_RANK": "1"}, False),
    ({"NODE_RANK": "1"}, False),  # the command started by hand on the second machine
    ({"SLURM_PROCID": "0"}, True),
    ({"SLURM_PROCID": "3"}, False),
])
def test_the_first_process_is_told_from_the_launchers_variables(monkeypatch, variables, first):
    from bert_exp.runner.ranks import is_global_rank_zero

    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert is_global_rank_zero() is first
