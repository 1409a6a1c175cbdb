"""The recipes after BERT as presets: each of cramming's, MosaicBERT's and ModernBERT's pre-trains briefly
on the shared corpus with its own architecture, objective and schedule, and fine-tunes from its own
checkpoint; MosaicBERT's through tagging and SQuAD too, ModernBERT's exports to transformers (slow:
about a minute on 2 cores)."""

import json
import math

import pytest
import transformers

from bert_exp.tools.export import main as export_main
from helpers import run_cli

pytestmark = pytest.mark.slow

RECIPES = {  # the preset -> what its run must have been
    "pretrain_crammed_tiny": {"feed_forward": "glu", "position_embedding_type": "sinusoidal",
                              "layer_norm_position": "pre", "dense_bias": False},
    "pretrain_mosaicbert_tiny": {"feed_forward": "glu", "position_embedding_type": "alibi", "unpad": "auto"},
    "pretrain_modernbert_tiny": {"position_embedding_type": "rotary", "local_attention": 32,
                                 "token_type_embeddings": False},
}


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def pre_train(env, preset: str, run_dir):
    result = run_cli([f"+experiment={preset}", "trainer.max_steps=4", "trainer.val_check_interval=4",
                      "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text())


def fine_tune(env, preset: str, init, run_dir, validation="trainer.limit_val_batches=2"):
    result = run_cli([f"+experiment={preset}", f"task.init_from={init}", "model=from_checkpoint",
                      "trainer.max_steps=2", validation, "logger=csv", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["initialised_from"].startswith(str(init))
    return info


@pytest.mark.parametrize("preset", RECIPES)
def test_each_recipe_pre_trains_and_fine_tunes_from_its_checkpoint(env, preset, tmp_path):
    info = pre_train(env, preset, tmp_path / "pretrain")
    assert info["status"] == "finished" and info["global_step"] == 4
    model = info["config"]["model"]
    for key, value in RECIPES[preset].items():
        assert model[key] == value, key
    assert info["config"]["task"]["module"]["objective"] == "mlm"  # none of them predicts the next sentence
    assert info["config"]["optim"]["scheduler"]["_target_"] == "bert_exp.tasks.warmup_stable_decay"
    assert math.isfinite(info["metrics"]["val/mlm_loss"]) and "val/nsp_acc" not in info["metrics"]
    tuned = fine_tune(env, "cola_tiny", tmp_path / "pretrain", tmp_path / "cola")
    assert "val/mcc" in tuned["metrics"]
    for key, value in RECIPES[preset].items():
        assert tuned["config"]["model"].get(key, value) == value or key == "unpad", key
    if preset == "pretrain_mosaicbert_tiny":  # ALiBi and the real-tokens path through the other heads
        fine_tune(env, "ner_tiny", tmp_path / "pretrain", tmp_path / "ner")
        fine_tune(env, "squad_v1_tiny_local", tmp_path / "pretrain", tmp_path / "squad", "+data.limit_val_examples=16")
    if preset == "pretrain_modernbert_tiny":
        out = tmp_path / "hf"
        assert export_main([str(tmp_path / "cola"), str(out)]) == 0
        theirs, loading = transformers.AutoModelForSequenceClassification.from_pretrained(
            out, output_loading_info=True)
        assert type(theirs) is transformers.ModernBertForSequenceClassification
        assert not loading["missing_keys"] and not loading["unexpected_keys"], loading
