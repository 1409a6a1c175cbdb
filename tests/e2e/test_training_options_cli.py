"""The training options after BERT through the CLI: a short pre-training with LAMB, the warm-up/stable/
decay schedule and gradient checkpointing (about 15 s on 2 cores)."""

import csv
import json
import math

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow


def test_lamb_wsd_and_checkpointing_pre_train(data_dir, cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=pretrain_tiny", "optim=lamb", "optim/scheduler=wsd",
                      "optim.scheduler.warmup_steps=2", "optim.scheduler.decay_ratio=0.5",
                      "optim.scheduler.decay_shape=linear", "+model.gradient_checkpointing=true",
                      "trainer.max_steps=8", "trainer.log_every_n_steps=1", "trainer.val_check_interval=8",
                      "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}"],
                     env={"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)})
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 8
    assert info["config"]["optim"]["optimizer"]["_target_"] == "bert_exp.tasks.Lamb"
    assert info["config"]["model"]["gradient_checkpointing"] is True
    assert math.isfinite(info["metrics"]["val/mlm_loss"])
    with open(run_dir / "logs" / "metrics.csv") as f:
        lr = [float(r["lr"]) for r in csv.DictReader(f) if r.get("lr")]
    peak = lr[2]  # warm-up over 2 steps, held to step 4, linear to 0 over the last 4
    assert lr == pytest.approx([peak / 2, peak, peak, peak, peak, peak * 0.75, peak * 0.5, peak * 0.25])
