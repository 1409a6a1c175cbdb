"""Every leaf key of a few presets set to a value of the wrong type (and numbers to zero and negative):
validation accepts it or raises ConfigError naming that key, never another exception."""

import copy

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from bert_exp.runner.placement import check_combination
from bert_exp.runner.validation import ConfigError, validate_config
from tests.helpers import compose_config

PRESETS = ["pretrain_tiny", "cola_tiny", "squad_v1_tiny_local"]
SKIP = ("paths.", "hydra")  # where the run writes: checked by the run directory's guard


def leaves(node, key=""):
    if isinstance(node, DictConfig):
        for name in node:
            child = node._get_node(name)
            if OmegaConf.is_interpolation(node, name):
                continue
            yield from leaves(child, f"{key}.{name}" if key else str(name))
    elif isinstance(node, ListConfig):
        return
    else:
        yield key, node._value()


def bad_values(value):
    if isinstance(value, bool):
        return ["maybe", 3]
    if isinstance(value, (int, float)):
        return ["abc", 0, -1, -0.5]
    if isinstance(value, str):
        return [12345, -1]
    return ["abc", -1]


@pytest.mark.parametrize("preset", PRESETS)
def test_a_bad_value_is_accepted_or_named(preset, tmp_path):
    base = compose_config([f"+experiment={preset}", f"task.init_from={tmp_path}"], run_dir=tmp_path / "run")
    failures = []
    for key, value in leaves(base):
        if key.startswith(SKIP) or key.endswith("_target_"):
            continue
        for bad in bad_values(value):
            cfg = copy.deepcopy(base)
            with open_dict(cfg):
                OmegaConf.update(cfg, key, bad, force_add=True)
            try:
                validate_config(cfg)
                check_combination(cfg, cuda_devices=0)
            except ConfigError as err:
                if key not in str(err) and key.split(".")[-1] not in str(err):
                    failures.append(f"{key}={bad!r}: the error does not name it: {err}")
            except Exception as err:  # noqa: BLE001
                failures.append(f"{key}={bad!r}: {type(err).__name__}: {err}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("override", ["model.hidden_size=0", "model.num_hidden_layers=-1", "data.instances.max_seq_length=0",
                                      "optim.scheduler.warmup_steps=-5", "+model.hidden_dropout_prob=1.5",
                                      "global_batch_size=abc"])
def test_nonsensical_numbers_are_refused_naming_the_key(override, tmp_path):
    with pytest.raises(ConfigError, match=override.lstrip("+").split("=")[0]):
        validate_config(compose_config(["+experiment=pretrain_tiny", override], run_dir=tmp_path / "run"))
