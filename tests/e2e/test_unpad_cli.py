"""model.unpad through the CLI: a short fine-tuning run (SST-2's rows, random batches, dropout off) gives
the same losses and metrics unpadded as padded, and a short pre-training runs unpadded (slow: about 15 s a
run on 2 cores)."""

import csv
import json

import pytest

from helpers import run_cli, tiny_hf_directory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def fine_tune(env, tiny, run_dir, *extra):
    result = run_cli(["+experiment=sst2_minilm", f"task.init_from={tiny}", "model=from_checkpoint",
                      "+model.hidden_dropout_prob=0.0", "+model.attention_probs_dropout_prob=0.0",
                      "+data.limit_train_examples=64", "global_batch_size=8", "trainer.max_steps=4",
                      "trainer.check_val_every_n_epoch=null", "trainer.val_check_interval=4",
                      "trainer.limit_val_batches=4", "+trainer.num_sanity_val_steps=0", "logger=csv", *extra,
                      f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(run_dir / "logs" / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    return json.loads((run_dir / "run.json").read_text()), losses, result.stdout


def test_unpadded_fine_tuning_gives_the_padded_run_s_metrics(env, tmp_path):
    tiny = tiny_hf_directory(tmp_path / "bert")
    padded, padded_losses, padded_out = fine_tune(env, tiny, tmp_path / "padded", "trainer.log_every_n_steps=1")
    unpadded, losses, out = fine_tune(env, tiny, tmp_path / "unpadded", "+model.unpad=true",
                                      "trainer.log_every_n_steps=1")
    assert unpadded["config"]["model"]["unpad"] is True and "unpad" not in padded["config"]["model"]
    # which path ran: the first lines say, run.json and the closing lines count the batches
    assert "model.unpad=true: the encoder runs on each batch's real tokens alone" in out
    assert unpadded["unpad"] == {"setting": True, "training_batches": 4, "unpadded": 4}
    assert "model.unpad=true: 4 of 4 training batches ran on their real tokens alone" in out
    assert "unpad" not in padded and "model.unpad" not in padded_out
    assert len(losses) == len(padded_losses) == 4 and losses == pytest.approx(padded_losses, abs=1e-5)
    validation = [key for key in padded["metrics"] if key.startswith("val/")]
    assert "val/acc" in validation
    for key in validation:
        assert unpadded["metrics"][key] == pytest.approx(padded["metrics"][key], abs=1e-5), key


def test_unpadded_pre_training_runs(env, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=pretrain_tiny", "+model.unpad=true", "trainer.max_steps=3",
                      "trainer.val_check_interval=3", "trainer.limit_val_batches=2", "logger=csv",
                      f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["config"]["model"]["unpad"] is True
    assert info["unpad"] == {"setting": True, "training_batches": 3, "unpadded": 3}
    assert info["metrics"]["val/mlm_loss"] > 0
