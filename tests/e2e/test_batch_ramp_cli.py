"""A batch ramp trains as its sizes say, equals Lightning's accumulation where it does not ramp, and
resumes bitwise from a stop inside a step (in-process runs, fp32 on the CPU)."""

import csv
import json
import signal

import pytest
import torch

from bert_exp.runner.config_tree import summary_lines
from bert_exp.runner.run import run
from bert_exp.tasks.batch_ramp import BatchRamp
from helpers import REPO, compose_config

pytestmark = pytest.mark.slow

STEPS = 8
BASE = ["+experiment=pretrain_tiny", "data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']",
        "data.tokenizer.vocab_size=2000", "data.instances.max_seq_length=128", "global_batch_size=32",
        "device_batch_size=8", f"trainer.max_steps={STEPS}", "trainer.val_check_interval=4",
        "trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0", "trainer.log_every_n_steps=1",
        "callbacks.last_checkpoint.every_n_train_steps=4", "logger=csv", "optim.scheduler.warmup_steps=2"]
RAMP = [*BASE, "trainer.batch_ramp={start: 8, share: 0.75}"]  # 1 -> 4 microbatches over 6 steps


@pytest.fixture
def in_process(cache_dir, monkeypatch):
    monkeypatch.setenv("BERT_EXP_CACHE", str(cache_dir))
    monkeypatch.syspath_prepend(str(REPO / "tests" / "faults"))


@pytest.fixture(scope="module")
def reference(cache_dir, tmp_path_factory):
    """One uninterrupted ramped run, for the tests that read it."""
    run_dir = tmp_path_factory.mktemp("ramped")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERT_EXP_CACHE", str(cache_dir))
        run(compose_config(RAMP, run_dir=run_dir))
    return run_dir


def last(run_dir) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def losses(run_dir) -> list[tuple[str, str]]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return [(r["step"], r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_the_ramp_groups_its_microbatches_and_reports_them(reference):
    ramp = BatchRamp(1, 4, "linear")
    expected = [ramp.microbatches(step / (0.75 * STEPS)) for step in range(STEPS)]
    assert expected == [1, 1, 2, 2, 3, 3, 4, 4]
    saved = last(reference)
    assert saved["global_step"] == STEPS
    assert saved["batch_ramp"]["microbatches_done"] == sum(expected) == 20
    assert saved["loops"]["fit_loop"]["epoch_loop.batch_progress"]["total"]["processed"] == 20
    info = json.loads((reference / "run.json").read_text())
    assert info["batch_ramp"] == {"start_microbatches": 1, "final_microbatches": 4, "shape": "linear",
                                  "steps": STEPS, "microbatches": 20}
    assert info["host"]["accumulate_grad_batches"] == 4  # the final step's microbatches, not Lightning's 1
    assert "batch 8 ramped to 32 over 75% of the run (linear)" in summary_lines(compose_config(RAMP))[1]


def test_a_ramp_at_the_full_batch_trains_as_lightnings_accumulation(in_process, tmp_path):
    lightning = tmp_path / "lightning"  # device batch 8 of 32: Lightning accumulates 4 microbatches
    run(compose_config(BASE, run_dir=lightning))
    ours = tmp_path / "ours"
    run(compose_config([*BASE, "trainer.batch_ramp={start: 32, share: 0.5}"], run_dir=ours))
    theirs, mine = last(lightning)["state_dict"], last(ours)["state_dict"]
    assert last(lightning)["global_step"] == last(ours)["global_step"] == STEPS
    assert theirs.keys() == mine.keys()
    for key in theirs:  # the same clipping (1.0), schedule and loss scaling
        torch.testing.assert_close(mine[key], theirs[key], rtol=1e-5, atol=1e-6, msg=key)


def test_a_stop_inside_a_ramped_step_waits_for_its_end_and_resumes_bitwise(reference, in_process, tmp_path):
    # microbatch 7 (0-based) is the second of step 4's three: the run trains the third, then saves
    stopped = tmp_path / "stopped"
    fault = "+callbacks.fault={_target_:inject.SignalAt,signal:SIGTERM,micro_batch:7}"
    with pytest.raises(SystemExit) as stop:
        run(compose_config([*RAMP, fault], run_dir=stopped))
    assert stop.value.code == 128 + signal.SIGTERM
    assert last(stopped)["global_step"] == 5 and last(stopped)["batch_ramp"]["microbatches_done"] == 9
    finished = tmp_path / "finished"
    run(compose_config([*RAMP, f"ckpt_path={stopped}"], run_dir=finished))
    assert losses(stopped) + losses(finished) == losses(reference)
    expected, resumed = last(reference)["state_dict"], last(finished)["state_dict"]
    assert all(torch.equal(expected[k], resumed[k]) for k in expected)


def test_a_ramp_over_a_share_of_a_token_budget_follows_its_clock(in_process, tmp_path):
    budget = [o for o in RAMP if not o.startswith(("trainer.max_steps", "optim.scheduler.warmup_steps"))]
    run(compose_config([*budget, "trainer.budget=24k", "optim.scheduler.warmup_steps=null",
                        "optim.scheduler.warmup_ratio=0.1"], run_dir=tmp_path))
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "finished"
    ramp, saved = info["batch_ramp"], last(tmp_path)
    # ramped over the first half of the budget: more than one microbatch a step on average, fewer than four
    assert 1 < ramp["microbatches"] / ramp["steps"] < 4, ramp
    assert saved["global_step"] == ramp["steps"]
