"""A budgeted run stops when its budget is spent, with the schedule at its end value, and a resumed run
ends at the same total budget (tiny models, seconds-long budgets)."""

import csv
import json

import pytest
import torch

from helpers import run_cli

pytestmark = pytest.mark.slow

BUDGETED = ["+experiment=pretrain_tiny", "optim.scheduler.warmup_steps=null", "optim.scheduler.warmup_ratio=0.1",
            "trainer.log_every_n_steps=1", "trainer.limit_val_batches=2",
            "trainer.max_steps=-1", "logger=csv"]


def rows(run_dir):
    with open(run_dir / "logs" / "metrics.csv") as f:
        return [r for r in csv.DictReader(f) if r.get("lr")]


@pytest.fixture
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def test_token_budget_stops_with_the_schedule_spent_and_resumes_to_the_same_total(env, tmp_path):
    # about 32 x 128 tokens a step: 60k tokens is some 15 steps
    whole = tmp_path / "whole"
    result = run_cli([*BUDGETED, "trainer.budget=60k", f"hydra.run.dir={whole}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((whole / "run.json").read_text())
    assert info["status"] == "finished" and info["throughput"]["train_tokens"] >= 60_000
    steps = info["global_step"]
    assert 5 < steps < 40
    # the step the budget stopped at is saved (not a multiple of every_n_train_steps=500): a later phase and
    # task.init_from=RUN start from the final model
    assert info["last_checkpoint"]["step"] == steps
    assert torch.load(whole / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"] == steps
    rates = [float(r["lr"]) for r in rows(whole)]
    assert max(rates) > 5e-4 and rates[-1] < 0.15 * max(rates)  # warmed up, then decayed to near 0 at the end

    # stopped part-way by max_steps, then resumed without it: the same budget, the same end
    first = tmp_path / "first"
    result = run_cli([*BUDGETED, "trainer.budget=60k", "trainer.max_steps=6", f"hydra.run.dir={first}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    second = tmp_path / "second"
    result = run_cli([*BUDGETED, "trainer.budget=60k", f"ckpt_path={first}", f"hydra.run.dir={second}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = json.loads((second / "run.json").read_text())
    assert resumed["global_step"] == steps
    assert [float(r["lr"]) for r in rows(second)][-1] == pytest.approx(rates[-1], rel=1e-6)


def test_time_budget_ends_on_time(env, tmp_path):
    run_dir = tmp_path / "timed"
    result = run_cli([*BUDGETED, "trainer.budget=10s", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished"
    # the training clock stops within a step of the budget (validation and saving come after it), however
    # busy the machine: the overshoot is at most about one step
    seconds, steps = info["throughput"]["train_seconds"], info["global_step"]
    assert 9 <= seconds < 10 + 2 * seconds / steps + 1, (seconds, steps)
    rates = [float(r["lr"]) for r in rows(run_dir)]
    peak = rates.index(max(rates))
    assert rates[-1] < max(rates) and all(a >= b for a, b in zip(rates[peak:], rates[peak + 1:]))  # decaying
