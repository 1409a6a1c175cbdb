"""Tagging through the CLI: a few steps of pos_ud_minilm and ner_wnut17_minilm on small slices; the
labels saved with the run and in the checkpoint; the NER run exported to transformers."""

import json

import pytest

from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.tools.export import main as export_main
from helpers import run_cli

pytestmark = pytest.mark.slow
SHORT = ["trainer.max_steps=3", "trainer.limit_val_batches=1", "data.limit_train_examples=24",
         "data.limit_val_examples=16", "global_batch_size=8", "data.loader.eval_batch_size=16", "logger=csv"]


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def run(env, tmp_path, experiment):
    run_dir = tmp_path / experiment
    result = run_cli([f"+experiment={experiment}", *SHORT, f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, json.loads((run_dir / "run.json").read_text())


def test_pos_ud_minilm_runs(env, tmp_path):
    run_dir, info = run(env, tmp_path, "pos_ud_minilm")
    assert info["status"] == "finished"
    assert info["metrics"]["val/accuracy"] == info["metrics"]["val/dev/accuracy"]
    assert "val/test/accuracy" in info["metrics"]
    labels = json.loads((run_dir / "labels.json").read_text())
    assert len(labels) == 17 and "NOUN" in labels
    assert load_checkpoint(run_dir).labels == labels


def test_ner_wnut17_minilm_runs_and_exports(env, tmp_path):
    transformers = pytest.importorskip("transformers")
    run_dir, info = run(env, tmp_path, "ner_wnut17_minilm")
    for key in ("val/f1", "val/precision", "val/recall", "val/dev/f1", "val/test/f1"):
        assert key in info["metrics"]
    assert info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]
    assert export_main([str(run_dir), str(tmp_path / "hf")]) == 0
    model, loading = transformers.BertForTokenClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    assert model.config.id2label[0] == "O" and len(model.config.id2label) == 13
