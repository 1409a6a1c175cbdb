"""Each pre-training objective trains a few steps of its tiny preset through the CLI (on the inaugural
addresses, a small corpus), with finite losses (slow: about 25 s a run on 2 cores)."""

import json
import math

import pytest

from helpers import run_cli

pytestmark = pytest.mark.slow

PRESETS = {  # preset -> (monitored metric, metrics the objective logs)
    "pretrain_tiny": ("val/mlm_loss", ["train/nsp_loss", "val/nsp_acc"]),
    "pretrain_roberta_tiny": ("val/mlm_loss", ["val/mlm_acc"]),
    "pretrain_albert_tiny": ("val/mlm_loss", ["train/sop_loss", "val/sop_acc"]),
    "pretrain_clm_tiny": ("val/lm_loss", ["train/lm_loss", "val/lm_ppl"]),
    "pretrain_electra_tiny": ("val/loss", ["train/rtd_loss", "val/rtd_acc", "val/mlm_loss"]),
}


@pytest.fixture(scope="module")
def env(data_dir, cache_dir, tmp_path_factory):
    outputs = tmp_path_factory.mktemp("outputs")
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "BERT_EXP_OUTPUTS": str(outputs)}


def train(preset: str, env: dict, run_dir, *extra: str):
    result = run_cli([f"+experiment={preset}", "data.files=[${paths.data_dir}/corpus/inaugural/*.txt]",
                      "data.tokenizer.vocab_size=2000", "trainer.max_steps=3", "trainer.val_check_interval=3",
                      "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}", *extra], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def trained(env, tmp_path_factory):
    """Each preset's run, trained when a test first asks for it (the export tests read the runs the
    training tests made)."""
    runs = {}

    def run_of(preset: str):
        if preset not in runs:
            run_dir = tmp_path_factory.mktemp(preset) / "run"
            runs[preset] = run_dir, train(preset, env, run_dir)
        return runs[preset]
    return run_of


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_objective_trains_with_finite_losses(preset, trained):
    _, info = trained(preset)
    monitor, logged = PRESETS[preset]
    metrics = info["metrics"]
    assert info["status"] == "finished" and info["global_step"] == 3 and info["monitor"] == monitor
    for key in ["train/loss", monitor, *logged]:
        assert key in metrics and math.isfinite(metrics[key]), (key, metrics)
    if preset == "pretrain_roberta_tiny":
        assert "train/nsp_loss" not in metrics
    if preset == "pretrain_albert_tiny":
        assert info["config"]["model"]["share_layers"] and info["config"]["model"]["embedding_size"] == 64


EXPORTS = {"pretrain_electra_tiny": "ElectraForPreTraining", "pretrain_albert_tiny": "AlbertForPreTraining"}


@pytest.mark.parametrize("preset", list(EXPORTS))
def test_electra_and_albert_runs_export_as_their_huggingface_architectures(preset, trained, tmp_path, capsys):
    import transformers

    from bert_exp.tools.export import main as export_main

    run_dir, _ = trained(preset)
    out_dir = tmp_path / f"{preset}-hf"
    assert export_main([str(run_dir), str(out_dir)]) == 0, capsys.readouterr().err[-2000:]
    assert f"as {EXPORTS[preset]}" in capsys.readouterr().out
    config = json.loads((out_dir / "config.json").read_text())
    assert config["architectures"] == [EXPORTS[preset]] and config["hidden_size"] == 128
    directories = {out_dir: getattr(transformers, EXPORTS[preset])}
    if preset == "pretrain_albert_tiny":
        assert config["embedding_size"] == 64 and config["num_hidden_groups"] == 1
    else:  # the generator (H=64) next to the discriminator
        directories[out_dir / "generator"] = transformers.ElectraForMaskedLM
    for directory, hf_cls in directories.items():
        _, info = hf_cls.from_pretrained(directory, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (directory, info)
