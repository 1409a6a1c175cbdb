"""Fine-tuning options a Trainer or run_glue user expects, through the CLI on a tiny random BERT (the options'
mechanics, not learning): early stopping on the monitored metric."""

import json

import pytest

from helpers import run_cli, tiny_hf_directory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(data_dir, cache_dir):
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_hf_directory(tmp_path_factory.mktemp("tiny") / "bert")


def short(tiny, run_dir, *extra):
    return ["+experiment=sst2_minilm", f"task.init_from={tiny}", "model=from_checkpoint", "+data.limit_train_examples=64",
            "data.max_seq_length=32", "global_batch_size=8", "trainer.check_val_every_n_epoch=null",
            "trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0", "precision=auto", "logger=csv",
            *extra, f"hydra.run.dir={run_dir}"]


def test_early_stopping_ends_the_run_when_the_metric_stops_improving(env, tiny, tmp_path):
    """At a rate of 1e-9 accuracy never moves: the first validation sets the best, the next two do not beat
    it, and with patience 2 the run ends at step 3 of 20, finished, its best checkpoint kept."""
    run_dir = tmp_path / "run"
    done = run_cli(short(tiny, run_dir, "callbacks=early_stopping", "callbacks.early_stopping.patience=2",
                         "optim.optimizer.lr=1e-9", "trainer.max_steps=20", "trainer.val_check_interval=1"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "finished" and record["global_step"] == 3
    assert record["stopped_early"]["step"] == 3 and "did not improve in the last 2 records" in \
        record["stopped_early"]["reason"], record["stopped_early"]
    assert "stopped early at step 3: Monitored metric val/acc did not improve" in done.stdout
    assert record["best_checkpoint"] and (run_dir / "checkpoints").is_dir()


def test_balanced_class_weights_through_the_cli(env, tiny, tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli(short(tiny, run_dir, "+task.module.class_weights=balanced", "trainer.max_steps=2",
                         "trainer.val_check_interval=2"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "class weights (balanced, from 64 training rows): " in (run_dir / "bert_exp.log").read_text()
    scored = run_cli([str(run_dir)], env=env, module="bert_exp.score")  # validates without the training rows
    assert scored.returncode == 0, scored.stderr[-3000:]
    wrong = run_cli(short(tiny, tmp_path / "wrong", "+task.module.class_weights=[1.0]"), env=env)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1] == \
        "error: task.module.class_weights=[1.0]: 2 positive weights, one per class", wrong.stderr[-2000:]


def test_long_documents_in_windows_through_the_cli(env, tiny, tmp_path):
    """SST-2's sentences joined six at a time into documents of 60 to 200 tokens, read in windows of 32: the
    run trains on every window under DDP (two processes, each validating its share of the windows) and is
    scored per document; python -m bert_exp.score, one process, gives the same accuracy."""
    from bert_exp.data.tasks.glue import read_examples

    rows = read_examples(env["BERT_EXP_DATA"] + "/glue/SST-2/train.tsv", ["sentence"], "label", 2, header=True)[:96]
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": " ".join(r.texts[0] for r in rows[i:i + 6]), "label": rows[i].label})
                            + "\n" for i in range(0, 96, 6)))
    run_dir = tmp_path / "run"
    done = run_cli(short(tiny, run_dir, "data=text_classification", f"data.train_file={docs}", f"data.val_files.dev={docs}",
                         "data.windows={overlap:8,aggregate:max}", "trainer.max_steps=2", "trainer.val_check_interval=2",
                         "trainer.limit_val_batches=null", "hardware=ddp_cpu"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((run_dir / "run.json").read_text())["metrics"]
    assert 0.0 <= metrics["val/acc"] <= 1.0
    scored = run_cli([str(run_dir)], env=env, module="bert_exp.score")
    assert scored.returncode == 0 and f"val/acc = {metrics['val/acc']:.4f}" in scored.stdout, scored.stderr[-3000:]
