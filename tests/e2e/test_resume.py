"""Interrupted runs resume exactly: after SIGKILL (from the last periodic checkpoint) and after
SIGTERM (from the checkpoint written on the signal), the losses equal an uninterrupted run's, step for
step, across an epoch boundary: data order, dynamic masks and dropout all continue."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from bert_exp.runner.run import run
from helpers import REPO, compose_config, run_cli

pytestmark = pytest.mark.slow

MAX_STEPS = 30
OVERRIDES = [
    "+experiment=pretrain_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]",
    "data.tokenizer.vocab_size=2000", "global_batch_size=32", f"trainer.max_steps={MAX_STEPS}",
    "trainer.val_check_interval=10", "trainer.limit_val_batches=2", "trainer.log_every_n_steps=1",
    "callbacks.last_checkpoint.every_n_train_steps=4", "logger=csv", "optim.scheduler.warmup_steps=5",
]


def losses(run_dir) -> dict[int, str]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def start(run_dir, env, *extra):
    """The CLI in a session of its own: a test that fails can end it and every process it started."""
    return subprocess.Popen([sys.executable, "-m", "bert_exp", *OVERRIDES, *extra, f"hydra.run.dir={run_dir}"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for_step(proc, run_dir, step: int, timeout: float = 300):
    """Until the run has logged ``step`` (its metrics.csv is written every step)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"the run ended early: {proc.stderr.read()[-2000:]}"
        path = run_dir / "logs" / "metrics.csv"
        if path.exists() and any(s >= step for s in losses(run_dir)):
            return
        time.sleep(0.05)
    raise TimeoutError(step)


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {**os.environ, "BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "WANDB_MODE": "offline"}


def test_killed_and_terminated_runs_resume_exactly(env, cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("BERT_EXP_CACHE", str(cache_dir))
    # the reference, uninterrupted (in this process: the same run() the CLI calls)
    reference = tmp_path / "uninterrupted"
    run(compose_config(OVERRIDES, run_dir=reference))
    expected = losses(reference)
    assert sorted(expected) == list(range(MAX_STEPS))  # Lightning logs step 0 .. 29

    # SIGKILL after step 9: nothing is saved on the way out; the last checkpoint is step 8's
    killed = tmp_path / "killed"
    proc = start(killed, env)
    wait_for_step(proc, killed, 9)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = torch.load(killed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] % 4 == 0 and saved["global_step"] >= 8
    assert json.loads((killed / "run.json").read_text())["status"] == "running"  # written at the start

    # resumed, then SIGTERM: the step in flight finishes and is checkpointed
    terminated = tmp_path / "terminated"
    proc = start(terminated, env, f"ckpt_path={killed}")
    wait_for_step(proc, terminated, saved["global_step"] + 5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    info = json.loads((terminated / "run.json").read_text())
    assert info["status"] == "interrupted" and info["resumed_from"] == str(killed / "checkpoints" / "last.ckpt")
    stopped = torch.load(terminated / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert stopped["global_step"] == info["global_step"] > saved["global_step"] + 5

    # resumed to the end
    finished = tmp_path / "finished"
    run(compose_config([*OVERRIDES, f"ckpt_path={terminated}"], run_dir=finished))

    resumed = {}
    for directory in (killed, terminated, finished):  # a later run's step replaces an earlier one's
        resumed.update(losses(directory))
    assert sorted(resumed) == sorted(expected)
    # Equal to float rounding. Alone, every step is bitwise equal; inside the full suite two of thirty
    # losses once differed in the 7th digit (~1e-7 relative) with the steps after them bitwise equal
    # again. Without the random-state restore, step 8 is off by 2e-5 and later steps by 7e-4.
    mismatched = {s: (resumed[s], expected[s]) for s in expected
                  if abs(float(resumed[s]) - float(expected[s])) > 1e-6 * abs(float(expected[s]))}
    assert not mismatched, mismatched
    assert sum(resumed[s] == expected[s] for s in expected) >= len(expected) - 3
    # the resumed runs really did pick up mid-way, and crossed an epoch boundary
    assert min(losses(terminated)) == saved["global_step"] and min(losses(finished)) == stopped["global_step"]
    with open(finished / "logs" / "metrics.csv") as f:
        epochs = {int(r["epoch"]) for r in csv.DictReader(f) if r.get("epoch")}
    assert len(epochs) > 1 or json.loads((finished / "run.json").read_text())["global_step"] == MAX_STEPS


def test_a_ddp_run_terminated_and_resumed_equals_an_uninterrupted_one(env, tmp_path):
    """Two CPU processes (gloo): SIGTERM to the launching process reaches both, both stop after the same
    step and the checkpoint holds each one's random state; the resumed run's losses (rank 0's) are
    those of an uninterrupted run. The signal lands at the worst moment, deterministically: the first
    process sends it to itself just before its backward pass, while the second waits inside the
    gradient all-reduce (Lightning's own handler, with its collective, deadlocked there)."""
    ddp = ["hardware=ddp_cpu", "trainer.max_steps=40", "callbacks.last_checkpoint.every_n_train_steps=1000"]
    terminated = tmp_path / "terminated"
    faults = {**env, "PYTHONPATH": str(REPO / "tests" / "faults")}
    proc = start(terminated, faults, *ddp, "+callbacks.fault={_target_:inject.SignalInBackwardAt,step:15,delay:1}")
    try:
        assert proc.wait(timeout=240) == 128 + signal.SIGTERM, proc.stderr.read()[-3000:]
    finally:  # a hung run: both processes go
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    saved = torch.load(terminated / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert saved["global_step"] == 16 and len(saved["random_states"]) == 2  # the step in flight; one per process

    resumed, reference = tmp_path / "resumed", tmp_path / "reference"
    for run_dir, extra in ((resumed, [f"ckpt_path={terminated}"]), (reference, [])):  # no signal: as a user runs them
        done = run_cli([*OVERRIDES, *ddp, *extra, f"hydra.run.dir={run_dir}"], env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    expected = losses(reference)
    assert sorted(expected) == list(range(40)) and min(losses(resumed)) == saved["global_step"]
    continued = {**losses(terminated), **losses(resumed)}
    assert sorted(continued) == sorted(expected)
    # bitwise when run alone; the same float-rounding allowance as the single-process test above
    assert all(abs(float(continued[s]) - float(expected[s])) <= 1e-6 * abs(float(expected[s])) for s in expected)
    assert sum(continued[s] == expected[s] for s in expected) >= len(expected) - 3


# -- exact at the awkward points: a validation step, an epoch end, inside a gradient accumulation -------
# In-process runs, stopped by a real SIGTERM that a test callback sends at a chosen batch
# (tests/faults/inject.py); the reference is an uninterrupted run of the same config. CPU, fp32: bitwise.

SHORT = [o for o in OVERRIDES if not o.startswith(("trainer.max_steps", "trainer.val_check_interval",
                                                   "callbacks.last_checkpoint", "data.files"))]
SHORT += ["data.files=['${paths.data_dir}/corpus/inaugural/19[0-4]*.txt']",  # epochs of a few steps
          "data.instances.max_seq_length=128",  # (with instances of 128: twice as many steps at 64)
          "trainer.val_check_interval=4", "callbacks.last_checkpoint.every_n_train_steps=4",
          "+trainer.num_sanity_val_steps=0", "trainer.limit_val_batches=1"]


SHORT_STEPS = 14


def _signal_at(**where) -> str:
    fields = ",".join(f"{k}:{v}" for k, v in where.items())
    return "+callbacks.fault={_target_:inject.SignalAt,signal:SIGTERM," + fields + "}"


def _stopped(overrides, run_dir) -> int:
    """Runs until the injected SIGTERM stops it; the step its last.ckpt holds."""
    with pytest.raises(SystemExit) as stop:
        run(compose_config(overrides, run_dir=run_dir))
    assert stop.value.code == 128 + signal.SIGTERM
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert not list((run_dir / "checkpoints").glob(".*partial"))
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["global_step"]


@pytest.fixture
def in_process(cache_dir, monkeypatch):
    monkeypatch.setenv("BERT_EXP_CACHE", str(cache_dir))
    monkeypatch.syspath_prepend(str(REPO / "tests" / "faults"))


def test_resumed_at_a_validation_step_and_at_an_epoch_end_repeats_the_run_bitwise(in_process, tmp_path):
    # the epoch's length, from a first reference run long enough to cross it
    reference = tmp_path / "reference"
    run(compose_config([*SHORT, f"trainer.max_steps={SHORT_STEPS}"], run_dir=reference))
    with open(reference / "logs" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    epoch_steps = min(int(r["step"]) for r in rows if int(r["epoch"]) == 1)  # steps 0..E-1 are epoch 0
    assert 5 < epoch_steps < SHORT_STEPS - 1, epoch_steps
    expected = losses(reference)

    # stopped after step 4, a validation step: last.ckpt was written before the validation ran
    at_validation = tmp_path / "at_validation"
    assert _stopped([*SHORT, f"trainer.max_steps={SHORT_STEPS}", _signal_at(step=3)], at_validation) == 4
    # resumed there, stopped at the end of epoch 0
    at_epoch_end = tmp_path / "at_epoch_end"
    assert _stopped([*SHORT, f"trainer.max_steps={SHORT_STEPS}", f"ckpt_path={at_validation}",
                     _signal_at(step=epoch_steps - 1)], at_epoch_end) == epoch_steps
    finished = tmp_path / "finished"
    run(compose_config([*SHORT, f"trainer.max_steps={SHORT_STEPS}", f"ckpt_path={at_epoch_end}"], run_dir=finished))

    resumed = {**losses(at_validation), **losses(at_epoch_end), **losses(finished)}
    assert min(losses(at_epoch_end)) == 4 and min(losses(finished)) == epoch_steps
    assert resumed == expected  # the logged strings: bitwise


def test_a_stop_inside_a_gradient_accumulation_waits_for_its_step_and_resumes_bitwise(in_process, tmp_path):
    accumulate = [*SHORT, "trainer.accumulate_grad_batches=2", "trainer.max_steps=8"]
    reference = tmp_path / "reference"
    run(compose_config(accumulate, run_dir=reference))

    # SIGTERM at the end of micro-batch 6 (0-based), the first half of optimizer step 3: the run goes
    # on to the end of that step's accumulation, then saves
    stopped = tmp_path / "stopped"
    assert _stopped([*accumulate, _signal_at(micro_batch=6)], stopped) == 4
    finished = tmp_path / "finished"
    run(compose_config([*accumulate, f"ckpt_path={stopped}"], run_dir=finished))
    assert min(losses(finished)) == 4
    assert {**losses(stopped), **losses(finished)} == losses(reference)
