"""Less friction: trainer keys settable as key=value on every preset, a bare command that shows the help
instead of starting an endless run, --cfg in every form, and options a task cannot use refused first."""

from pathlib import Path

import pytest

from bert_exp.resources import resource_dir
from bert_exp.runner.validation import ConfigError, validate_config
from tests.helpers import compose_config, run_cli

PRESETS = sorted(p.stem for p in Path(resource_dir("conf"), "experiment").glob("*.yaml") if "pipeline" not in p.stem)
TRAINER_KEYS = {"limit_val_batches": 5, "val_check_interval": 50, "accumulate_grad_batches": 2,
                "limit_train_batches": 10, "max_epochs": 2, "check_val_every_n_epoch": 1,
                "max_steps": 7}


@pytest.mark.parametrize("preset", PRESETS)
def test_every_trainer_key_users_set_works_without_plus_on_every_preset(preset, tmp_path):
    overrides = [f"trainer.{k}={v}" for k, v in TRAINER_KEYS.items()]
    cfg = compose_config([f"+experiment={preset}", f"task.init_from={tmp_path}", *overrides])
    assert {k: cfg.trainer[k] for k in TRAINER_KEYS} == TRAINER_KEYS


def test_question_answering_refuses_limit_val_batches_before_work(tmp_path):
    cfg = compose_config(["+experiment=squad_v1_tiny_local", f"task.init_from={tmp_path}",
                          "trainer.limit_val_batches=20"], run_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"trainer.limit_val_batches=20: .*data.limit_val_examples"):
        validate_config(cfg)
    for fine in ("1.0", "null"):
        validate_config(compose_config(["+experiment=squad_v1_tiny_local", f"task.init_from={tmp_path}",
                                        f"trainer.limit_val_batches={fine}"], run_dir=tmp_path / "run"))
    validate_config(compose_config(["+experiment=pretrain_tiny", "trainer.limit_val_batches=20"],
                                   run_dir=tmp_path / "run"))


def test_no_experiment_prints_the_help_and_exits_2(tmp_path):
    result = run_cli([f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2
    assert "pretrain_tiny" in result.stderr and "+experiment=NAME" in result.stderr
    assert not (tmp_path / "run").exists()


def test_cfg_hydra_and_a_multirun_cfg_job_print_configs():
    result = run_cli(["+experiment=pretrain_tiny", "--cfg", "hydra"])
    assert result.returncode == 0, result.stderr
    assert "run:" in result.stdout and "job_logging:" in result.stdout
    result = run_cli(["-m", "+experiment=pretrain_tiny", "seed=1,2", "--cfg", "job"])
    assert result.returncode == 0, result.stderr
    assert "# job 0: +experiment=pretrain_tiny seed=1" in result.stdout
    assert "# job 1: +experiment=pretrain_tiny seed=2" in result.stdout
    assert "\nseed: 2\n" in result.stdout and "${" not in result.stdout


def test_a_mistyped_preset_or_option_is_one_line_with_the_nearest_names(tmp_path):
    from bert_exp.runner.help import unknown_choice

    assert "did you mean pretrain_tiny" in unknown_choice(["+experiment=pretrain_tinyy"])
    assert "hardware=cpux: no such option; did you mean cpu?" in unknown_choice(["+experiment=pretrain_tiny", "hardware=cpux"])
    assert unknown_choice(["+experiment=pretrain_tiny", "logger=[csv,tensorboard]"]) is None  # several loggers at once
    assert "logger=wandbx: no such option" in unknown_choice(["logger=[csv, wandbx]"])
    assert "sweeps=cola_grid" in unknown_choice(["-m", "+sweeps=cola_grid"])
    assert "seed=1,x" not in (unknown_choice(["-m", "model=tiny,mini,minni"]) or "") and \
        "model=minni" in unknown_choice(["-m", "model=tiny,mini,minni"])
    assert unknown_choice(["+experiment=pretrain_tiny", "model=mini", "trainer.max_steps=3", "~logger"]) is None
    result = run_cli(["+experiment=pretrain_tinyy", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "did you mean pretrain_tiny" in result.stderr and "--help" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_budget_that_does_not_parse_is_the_only_message(tmp_path):
    cfg = compose_config(["+experiment=pretrain_tiny", "trainer.budget=ten minutes", "optim.scheduler.warmup_steps=100"],
                         run_dir=tmp_path)
    with pytest.raises(ConfigError) as caught:
        validate_config(cfg)
    assert "trainer.budget='ten minutes': expected wall time" in str(caught.value)
    assert "warmup" not in str(caught.value)
