"""SQuAD v1.1 end to end through the CLI on CPU: a small slice from the real all-MiniLM-L6-v2 checkpoint
beats chance."""

import json
import os
import subprocess
import sys

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


def test_squad_slice_beats_chance(env, tmp_path):
    run_dir = tmp_path / "squad"
    result = run_cli(["+experiment=squad_v1_minilm_local", "+data.limit_train_examples=1200",
                      "+data.limit_val_examples=150", "data.max_seq_length=160", "data.doc_stride=64",
                      "global_batch_size=16", "trainer.max_steps=120", "trainer.val_check_interval=120",
                      "trainer.check_val_every_n_epoch=null", "optim.optimizer.lr=1e-4",
                      "optim.scheduler.warmup_ratio=0.0", "precision=auto", "logger=csv",
                      f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "run.json").read_text())["metrics"]
    predictions = json.loads((run_dir / "predictions.json").read_text())
    assert len(predictions) == 150
    # after only 5 steps this set-up scores F1 10.7 / EM 0. After 120 steps, measured here (seed 42, the
    # default): F1 12.2 / EM 8.0; seed 43 gave 12.1 / 8.0, and before the
    # CPU dropout change 17.9 / 12.0 (seed 42) and 9.3 / 4.7 (seed 43): 150 questions make a noisy score.
    # Re-measured 2026-11-25 (seed 42, fused query/key/value): F1 17.0 / EM 10.7 in 69 s; windows of 128
    # took 56 s but scored 13.0 / 8.0, too near the bar, so the windows stay at 160.
    assert metrics["val/exact_match"] > 5 and metrics["val/f1"] > 11, metrics


def test_squad_v2_slice_tunes_its_threshold_on_held_out_questions(env, tmp_path):
    """SQuAD 2.0 as data=squad_v2_local builds it, a short slice: both kinds of question trained on, the
    threshold tuned on the held-out articles' questions, the evaluated ones answered at it."""
    run_dir = tmp_path / "squad_v2"
    result = run_cli(["+experiment=squad_v2_minilm_local", "+data.limit_train_examples=160",
                      "+data.limit_val_examples=100", "data.max_seq_length=128", "data.doc_stride=64",
                      "global_batch_size=16", "trainer.max_steps=10", "trainer.val_check_interval=10",
                      "trainer.check_val_every_n_epoch=null", "logger=csv", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "run.json").read_text())["metrics"]
    assert {"val/null_threshold", "val/threshold_f1", "val/HasAns_f1", "val/NoAns_f1", "val/best_f1"} <= set(metrics)
    predictions = json.loads((run_dir / "predictions.json").read_text())
    null_odds = json.loads((run_dir / "null_odds.json").read_text())
    assert len(predictions) == len(null_odds) == 100  # the evaluated questions only, not the held-out ones
    threshold = metrics["val/null_threshold"]
    assert all((answer == "") == (null_odds[qid] > threshold) for qid, answer in predictions.items())
    assert f"SQuAD 2.0 at null-score threshold {threshold:.3g} (tuned on held-out training questions" in result.stdout
    assert "Answering every answerable question with its best span: HasAns F1 " in result.stdout
    assert 0.0 <= metrics["val/NoAns_auroc"] <= 1.0 and 0.0 <= metrics["val/HasAns_span_f1"] <= 100.0

    # scored again without training, from another directory: the same figures, and no file written there or
    # into the run (its predictions stay the run's own)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    scored = subprocess.run([sys.executable, "-m", "bert_exp.score", str(run_dir)], cwd=elsewhere, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=600)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert f"val/f1 = {metrics['val/f1']:.4f}" in scored.stdout and f"val/NoAns_auroc = {metrics['val/NoAns_auroc']:.4f}" in scored.stdout
    assert list(elsewhere.iterdir()) == []
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before
