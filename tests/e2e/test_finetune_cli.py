"""Fine-tuning end to end through the CLI on CPU: CoLA from the real all-MiniLM-L6-v2 checkpoint, beating
chance, and exported to transformers (the SQuAD slice is in test_squad_slice_cli.py, a file of its own
so that the suite's two workers run the two longest fine-tunings side by side)."""

import json

import pytest
import torch
import transformers

from bert_exp.tools.export import main as export_main
from bert_exp.tasks.checkpoints import load_checkpoint
from helpers import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


@pytest.fixture(scope="module")
def cola_run(env, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cola") / "run"
    # a short schedule: 300 steps (precision=auto: bf16 only where the CPU computes it fast) with a larger
    # rate than the paper's 2e-5, which needs
    # 2-3 epochs to leave the majority-class solution; batches of similar lengths, which pad less (measured
    # 2026-11-25: 47 s and in-domain MCC 0.171, against 59 s and 0.209 with plain random batches). In fp32
    # (2026-11-29, a 2-core AMD EPYC, Zen 4, held to AVX2, one thread) seeds 42/43/44 reach in-domain MCC
    # 0.168/0.134/0.180 after these 300 steps, but 0.084/0.036/0.036 after 200: the floor needs all 300
    result = run_cli(["+experiment=cola_minilm", "trainer.max_steps=300", "trainer.val_check_interval=300",
                      "trainer.check_val_every_n_epoch=null", "optim.optimizer.lr=1e-4",
                      "optim.scheduler.warmup_ratio=0.0", "precision=auto", "logger=csv",
                      "data.loader.group_by_length=true", f"hydra.run.dir={run_dir}",
                      "+data.val_files.in_domain_dev=${paths.data_dir}/cola/raw/in_domain_dev.tsv"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_cola_minilm_beats_chance(cola_run):
    info = json.loads((cola_run / "run.json").read_text())
    metrics = info["metrics"]
    assert metrics["val/mcc"] == metrics["val/dev/mcc"]  # GLUE's dev set: both dev files (1,043 rows)
    assert metrics["val/in_domain_dev/mcc"] > 0.1  # chance (or always "acceptable") is 0 (the floor measured there)
    assert "val/in_domain_dev/acc" in metrics  # a half added by an override, reported beside GLUE's dev set
    assert info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]
    assert info["initialised_from"].endswith("model")


def test_cola_run_exports_to_transformers(cola_run, tmp_path):
    out = tmp_path / "hf"
    assert export_main([str(cola_run), str(out)]) == 0
    theirs, info = transformers.BertForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = load_checkpoint(cola_run)
    assert ours.head == "classification" and ours.num_labels == 2
    from bert_exp.model import BertForSequenceClassification
    model = BertForSequenceClassification(ours.config, 2).eval()
    model.load_state_dict(ours.state_dict)
    tok = transformers.BertTokenizerFast.from_pretrained(out)
    batch = tok(["The cat sat on the mat.", "Cat the mat on sat."], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**batch), theirs.eval()(**batch).logits, atol=1e-5, rtol=1e-5)
