"""The hardware group, the precision axis, the derived batch, and combinations refused before work."""

import pytest
from hydra.utils import instantiate
from lightning.pytorch.strategies import FSDPStrategy

from bert_exp.runner.validation import ConfigError, validate_config
from bert_exp.runner.placement import check_combination, derive_placement, resolve_precision, xla_installed
from helpers import compose_config, run_cli

HARDWARE = ["cpu", "gpu", "ddp", "ddp_multinode", "fsdp", "tpu", "ddp_cpu"]


@pytest.mark.parametrize("hardware", HARDWARE)
def test_every_hardware_option_composes_validates_and_is_possible(hardware, tmp_path):
    cfg = compose_config(["+experiment=cola_minilm", f"hardware={hardware}"], run_dir=tmp_path)
    resolve_precision(cfg, cuda_devices=8, bf16_supported=True)
    validate_config(cfg)
    check_combination(cfg, cuda_devices=8, xla=True)  # as on an 8-GPU machine (or a TPU host)
    placement = derive_placement(cfg, cuda_devices=8)
    expected_world = {"cpu": 1, "gpu": 1, "ddp": 8, "ddp_multinode": 16, "fsdp": 8, "tpu": 8, "ddp_cpu": 2}
    assert placement.world_size == expected_world[hardware]
    assert placement.device_batch_size * placement.world_size * placement.accumulate_grad_batches == 32
    if hardware == "fsdp":
        assert isinstance(instantiate(cfg.trainer.strategy), FSDPStrategy)


def test_precision_is_its_own_axis():
    assert compose_config(["+experiment=cola_minilm"]).trainer.precision == "32-true"
    assert compose_config(["+experiment=cola_minilm", "hardware=gpu"]).trainer.precision == "auto"
    cfg = compose_config(["+experiment=cola_minilm", "hardware=gpu", "precision=16-mixed", "optim.optimizer.fused=false"])
    assert cfg.trainer.precision == "16-mixed"
    check_combination(cfg, cuda_devices=1)


def test_batch_and_accumulation_are_derived_from_the_global_batch():
    cfg = compose_config(["+experiment=cola_minilm", "hardware=ddp_cpu", "global_batch_size=32", "device_batch_size=4"])
    placement = derive_placement(cfg)
    assert (placement.world_size, placement.device_batch_size, placement.accumulate_grad_batches) == (2, 4, 4)
    cfg = compose_config(["+experiment=cola_minilm", "hardware=ddp_cpu", "trainer.accumulate_grad_batches=2"])
    assert derive_placement(cfg).device_batch_size == 8


@pytest.mark.parametrize("overrides, message", [
    (["hardware=tpu", "data.loader.pad_to_max_length=false"],
     "hardware=tpu needs static shapes: set data.loader.pad_to_max_length"),
    (["hardware=tpu", "precision=bf16-mixed"], "XLA takes 32-true, bf16-true or 16-true"),
    (["precision=16-mixed"], "precision=16-mixed needs a GPU"),
    (["precision=fp8"], "precision='fp8': expected one of"),
    (["hardware=ddp_cpu", "global_batch_size=33"], "global_batch_size=33 is not divisible by world size 2"),
    (["hardware=ddp_cpu", "device_batch_size=5"], "not divisible by world size 2 x device_batch_size=5"),
    (["hardware=gpu", "precision=16-mixed"], "cannot clip gradients"),
    (["hardware=fsdp", "trainer.accelerator=cpu"], "shards over CUDA devices"),
    (["trainer.num_nodes=2"], "needs a distributed strategy"),
])
def test_impossible_combinations_name_the_keys(overrides, message):
    cfg = compose_config(["+experiment=cola_minilm", *overrides])
    with pytest.raises(ConfigError, match=message):
        check_combination(cfg, cuda_devices=8, xla=True)


def test_a_tpu_without_torch_xla_is_one_line_before_any_work(tmp_path):
    cfg = compose_config(["+experiment=pretrain_tiny", "hardware=tpu"])
    with pytest.raises(ConfigError, match="hardware=tpu needs torch_xla, which is not installed"):
        check_combination(cfg, cuda_devices=0, xla=False)
    if xla_installed():
        return  # the command below would run (tests/xla/run.sh runs it)
    result = run_cli(["+experiment=pretrain_tiny", "hardware=tpu", "precision=bf16-true", "trainer.devices=1",
                      f"hydra.run.dir={tmp_path / 'run'}"], env={"BERT_EXP_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "hardware=tpu needs torch_xla" in result.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run" / "run.json").exists()  # no vocabulary trained


def test_a_gpu_config_on_a_machine_without_one_stops_before_work():
    with pytest.raises(ConfigError, match="no CUDA device here"):
        check_combination(compose_config(["+experiment=cola_minilm", "hardware=gpu"]), cuda_devices=0)


def test_the_cli_refuses_an_impossible_combination_in_one_message(tmp_path):
    result = run_cli(["+experiment=cola_minilm", "precision=16-mixed", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: impossible combination" in result.stderr and "precision=16-mixed needs a GPU" in result.stderr
    assert not (tmp_path / "run" / "run.json").exists()
