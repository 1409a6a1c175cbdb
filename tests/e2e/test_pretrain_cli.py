"""End to end through the CLI on the shared corpus (slow: about two minutes on 2 cores)."""

import csv
import json
import math

import pytest
import torch

from helpers import run_cli
from wandb_records import offline_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def first_run(data_dir, cache_dir, tmp_path_factory):
    outputs = tmp_path_factory.mktemp("outputs")
    env = {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "BERT_EXP_OUTPUTS": str(outputs)}
    result = run_cli(["+experiment=pretrain_tiny", "trainer.max_steps=200", "trainer.val_check_interval=100",
                      "trainer.limit_val_batches=10"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dirs = list((outputs / "pretraining" / "pretrain_tiny").iterdir())
    assert len(run_dirs) == 1
    return run_dirs[0], result, env


def test_pretrain_tiny_learns(first_run):
    run_dir, result, _ = first_run
    assert f"run directory: {run_dir}" in result.stdout
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 200
    metrics = info["metrics"]
    for key in ("train/loss", "train/mlm_loss", "train/nsp_loss", "lr", "train/tokens_per_sec",
                "val/mlm_loss", "val/mlm_acc", "val/mlm_ppl", "val/nsp_acc"):
        assert key in metrics, key
    assert not any(k.startswith("val/mlm_loss_by_position/") for k in metrics)  # instances of 64: one range
    with open(run_dir / "logs" / "metrics.csv") as f:
        val_losses = [float(r["val/mlm_loss"]) for r in csv.DictReader(f) if r.get("val/mlm_loss")]
    assert len(val_losses) == 2
    vocab_size = len((run_dir / "vocab.txt").read_text().split("\n")) - 1
    assert vocab_size == 2048
    # 200 of the preset's 2000 steps: well off a uniform guess (ln 2048 = 7.62), not yet past the unigram
    # level (6.29 for this corpus and vocabulary, in the data report)
    assert val_losses[-1] < val_losses[0] and val_losses[-1] < math.log(vocab_size) - 0.8
    assert metrics["val/mlm_ppl"] == pytest.approx(math.exp(metrics["val/mlm_loss"]), rel=1e-4)
    assert metrics["val/mlm_acc"] > 0.05
    assert info["throughput"]["tokens_per_sec"] > 0
    assert info["num_parameters"] > 5e5 and info["config"]["experiment_name"] == "pretrain_tiny"
    parts = info["parameters"]  # by part, counted once each
    assert parts["total"] == info["num_parameters"] == parts["embeddings"] + parts["encoder"] + parts["heads"]
    assert len(info["data_checksums"]) == 136 and all(len(v) == 64 for v in info["data_checksums"].values())
    assert info["versions"]["torch"] and info["versions"]["lightning"]
    report = info["data_report"]  # what the corpus cache holds and what truncation left out
    assert report["tokens"] > 1_000_000 and 0 <= report["tokens_dropped"] < report["tokens"]


def test_run_directory_holds_everything(first_run):
    run_dir, result, _ = first_run
    for name in ("config.yaml", ".hydra/config.yaml", "config_tree.txt", "vocab.txt", "checkpoints/last.ckpt",
                 "bert_exp.log"):
        assert (run_dir / name).exists(), name
    # the resolved config, printed as a tree when the run starts and saved with it
    tree = (run_dir / "config_tree.txt").read_text()
    assert tree.startswith("config\n├── task") and "hidden_size: 128" in tree and "${" not in tree
    # the console: a few lines of what runs and where, then the result (the whole tree is in the file)
    assert "run: pretrain_tiny (pretraining), model L2/H128, fresh weights" in result.stdout
    assert "200 steps" in result.stdout and f"config: {run_dir / 'config_tree.txt'}" in result.stdout
    assert "result: finished, step 200, val/mlm_loss = " in result.stdout
    # what the model learned, against knowing only how often each piece occurs
    assert "held-out masked pieces (" in result.stdout and "always guessing the most frequent piece" in result.stdout
    assert "on average the right piece gets " in result.stdout
    assert "├──" not in result.stdout and "Trainable params" not in result.stdout
    ours = [line for line in result.stdout.splitlines() if line.strip() and "|" not in line]  # not the progress bar
    assert len(ours) < 44, result.stdout  # a screen, with the corpus warnings of a cold cache
    best = list((run_dir / "checkpoints").glob("best-step*.ckpt"))
    assert len(best) == 1
    # W&B logs offline without credentials: one run, grouped by experiment, with config, curves and run.json
    wandb_run = offline_run(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    assert wandb_run["id"] == info["wandb_id"]
    accuracy = info["masked_accuracy"]
    assert accuracy["masked"] > 100 and 0 <= accuracy["baseline"] <= 1 and 0 <= accuracy["top10"] <= 1
    ratio = info["probability_over_unigram"]  # exp(unigram entropy - val/mlm_loss)
    assert ratio == pytest.approx(math.exp(info["data_report"]["unigram_entropy"] - info["metrics"]["val/mlm_loss"]), rel=1e-3)
    assert (wandb_run["group"], wandb_run["job_type"]) == ("pretrain_tiny", "pretraining")
    assert {"model", "optim", "trainer", "data"} <= set(wandb_run["config"])
    assert {"train/loss", "val/mlm_loss", "lr"} <= wandb_run["history_keys"]
    assert wandb_run["summary"]["status"] == '"finished"' and "run.json" in wandb_run["files"]
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["bert_config"]["hidden_size"] == 128 and len(ckpt["vocab"]) == 2048
    assert "model.bert.embeddings.word_embeddings.weight" in ckpt["state_dict"]


def test_a_second_run_resumes_from_the_first(first_run, tmp_path):
    run_dir, _, env = first_run
    resumed_dir = tmp_path / "resumed"
    result = run_cli(["+experiment=pretrain_tiny", f"ckpt_path={run_dir}", "trainer.max_steps=220",
                      "trainer.val_check_interval=10", "trainer.limit_val_batches=2",
                      f"hydra.run.dir={resumed_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((resumed_dir / "run.json").read_text())
    assert info["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert info["global_step"] == 220
    with open(resumed_dir / "logs" / "metrics.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f)]
    assert min(steps) >= 200  # continued, not restarted
    # and continued the same W&B run
    assert offline_run(resumed_dir)["id"] == info["wandb_id"] == json.loads((run_dir / "run.json").read_text())["wandb_id"]


def test_runs_never_overwrite_each_other(first_run):
    run_dir, _, env = first_run
    stamp = (run_dir / "run.json").stat().st_mtime_ns
    result = run_cli(["+experiment=pretrain_tiny", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 2 and "already holds a run" in result.stderr
    assert (run_dir / "run.json").stat().st_mtime_ns == stamp


def test_pretraining_run_exports_and_starts_a_fine_tuning(first_run, tmp_path):
    run_dir, _, env = first_run
    import transformers

    from bert_exp.tools.export import main as export_main
    assert export_main([str(run_dir), str(tmp_path / "hf")]) == 0
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert theirs.config.vocab_size == 2048

    cola_dir = tmp_path / "cola"
    result = run_cli(["+experiment=cola_tiny", f"task.init_from={run_dir}", "trainer.max_steps=5",
                      "trainer.limit_val_batches=1", "logger=csv", f"hydra.run.dir={cola_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads((cola_dir / "run.json").read_text())
    assert info["initialised_from"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]
    # 5 steps end inside the first epoch: the run still ends with a validation of the final weights
    assert "val/mcc" in info["metrics"] and "val/dev/mcc" in info["metrics"]
    assert (cola_dir / "vocab.txt").read_text() == (run_dir / "vocab.txt").read_text()
