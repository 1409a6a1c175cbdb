"""The GLUE presets end to end through the CLI, on the rows in the data directory: all-MiniLM-L6-v2
fine-tuned on STS-B, RTE and MRPC with short recipes, each run's monitored metric the one BERT's Table 1
reports. STS-B learns within a short run and is held to a floor above chance: the pair tasks' learning
check. RTE's and MRPC's runs are checked for what they read, map and report (on RTE this model stays near
chance with every recipe measured, on either implementation: docs/results/glue.md). (WNLI reads as RTE
does, integer labels: tests/data/test_glue.py.)"""

import json

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def finetune(env, run_dir, experiment, *overrides):
    result = run_cli([f"+experiment={experiment}", "precision=auto", "logger=csv", "data.loader.group_by_length=true",
                      "callbacks.last_checkpoint.keep_after_finish=false", "trainer.check_val_every_n_epoch=null",
                      *overrides, f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text()), result.stdout


def test_stsb_learns_similarity(env, tmp_path):
    """Regression on the 0-5 score: Spearman (monitored) and Pearson on 512 dev pairs."""
    info, out = finetune(env, tmp_path / "run", "glue_stsb_minilm_local", "trainer.max_steps=120",
                         "trainer.val_check_interval=120", "global_batch_size=16", "optim.optimizer.lr=1e-4",
                         "trainer.limit_val_batches=8", "data.loader.eval_batch_size=64")
    metrics = info["metrics"]
    assert info["monitor"] == "val/spearman" and metrics["val/spearman"] == metrics["val/dev/spearman"]
    # measured 2026-11-27 (AMD EPYC, bf16) on these 512 pairs: Spearman 0.577, Pearson 0.588 (64 steps at 5e-5
    # gave -0.16 on 1,024). In fp32 held to AVX2 (2026-11-29, AMD EPYC, Zen 4, one thread): 0.591 (seed 42),
    # 0.691 (seed 44); after 80 steps 0.338, 0.434, 0.583 on seeds 42/43/44, too near the floor
    assert metrics["val/spearman"] > 0.3 and metrics["val/pearson"] > 0.3  # chance is 0
    assert "result: finished, step 120, val/spearman = " in out


def test_rte_and_its_labelled_test_rows(env, tmp_path):
    """String labels (entailment / not_entailment) mapped; accuracy on dev and on the labelled test rows."""
    info, _ = finetune(env, tmp_path / "run", "glue_rte_minilm_local", "trainer.max_steps=10",
                       "trainer.val_check_interval=10", "global_batch_size=16", "trainer.limit_val_batches=2",
                       "data.loader.eval_batch_size=32")
    metrics = info["metrics"]
    assert info["monitor"] == "val/acc" and metrics["val/acc"] == metrics["val/dev/acc"]
    assert 0.0 < metrics["val/test/acc"] < 1.0 and info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]


def test_mrpc_monitors_f1_beside_accuracy_and_mcc(env, tmp_path):
    """The dev set held out of the training file (its last 408 rows); F1 monitored, with accuracy and the
    Matthews correlation beside it (0 for the majority answer, which shows learning where accuracy and F1
    start high). A short run checked for what it reports: the pair tasks' learning check is STS-B's above
    (pairs encoded the same way) and the classification head's is CoLA's (tests/e2e/test_finetune_cli.py);
    MRPC's own learning, measured, is in docs/results/glue.md."""
    info, out = finetune(env, tmp_path / "run", "glue_mrpc_minilm_local", "trainer.max_steps=10",
                         "trainer.val_check_interval=10", "global_batch_size=16", "trainer.limit_val_batches=2",
                         "data.loader.eval_batch_size=32", "task.module.pooling=mean",
                         "task.module.metrics=[f1,acc,mcc]")
    metrics = info["metrics"]
    assert info["monitor"] == "val/f1" and metrics["val/f1"] == metrics["val/dev/f1"]
    assert "result: finished, step 10, val/f1 = " in out
    assert 0.0 < metrics["val/dev/acc"] < 1.0 and -1.0 <= metrics["val/dev/mcc"] <= 1.0, metrics
    assert info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]
