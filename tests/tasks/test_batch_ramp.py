"""The batch ramp's sizes (tasks/batch_ramp.py) and its settings' checks (runner/batch_ramp.py)."""

import pytest
from omegaconf import OmegaConf

from bert_exp.runner.batch_ramp import ramp_from_config
from bert_exp.runner.placement import Placement
from bert_exp.runner.validation import ConfigError
from bert_exp.tasks.batch_ramp import BatchRamp


def test_linear_holds_each_size_for_an_equal_share_and_ends_at_the_full_batch():
    ramp = BatchRamp(start=1, final=5, shape="linear")
    sizes = [ramp.microbatches(p / 100) for p in range(100)]
    assert [sizes.count(n) for n in (1, 2, 3, 4)] == [25, 25, 25, 25]
    assert sizes == sorted(sizes)
    assert ramp.microbatches(1.0) == ramp.microbatches(3.0) == 5
    assert ramp.microbatches(-0.5) == 1


def test_steps_holds_each_size_for_as_many_steps():
    # ModernBERT's warm-up: each size for the same number of steps, so the share of the ramp's tokens a
    # size takes grows with it. Walk a ramp of 2..8 microbatches over 70,000 of them.
    ramp, ramp_microbatches = BatchRamp(start=2, final=8, shape="steps"), 70_000
    done, steps_at = 0, {}
    while done < ramp_microbatches:
        size = ramp.microbatches(done / ramp_microbatches)
        steps_at[size] = steps_at.get(size, 0) + 1
        done += size
    assert sorted(steps_at) == [2, 3, 4, 5, 6, 7]
    counts = list(steps_at.values())
    assert max(counts) - min(counts) <= 1, steps_at  # 2,000 steps each (70,000 / (2 + ... + 7) = 2,000)
    assert ramp.microbatches(1.0) == 8
    # the linear shape over the same tokens gives the small sizes more steps than the large
    linear, done, linear_steps = BatchRamp(2, 8, "linear"), 0, {}
    while done < ramp_microbatches:
        size = linear.microbatches(done / ramp_microbatches)
        linear_steps[size] = linear_steps.get(size, 0) + 1
        done += size
    assert linear_steps[2] > 3 * linear_steps[7]


def test_a_ramp_without_levels_is_the_full_batch():
    assert BatchRamp(4, 4, "steps").microbatches(0.0) == 4


def _cfg(**ramp):
    return OmegaConf.create({"task": {"name": "pretraining"}, "global_batch_size": 32,
                             "trainer": {"max_steps": 10, "budget": None, "batch_ramp": ramp or None},
                             "data": {"instances": {"max_seq_length": 64}}})


PLACEMENT = Placement(world_size=2, device_batch_size=4, accumulate_grad_batches=4)  # microbatch 8


def test_the_ramp_in_microbatches_of_the_placement():
    assert ramp_from_config(_cfg(start=8, share=0.5), PLACEMENT) == BatchRamp(1, 4, "linear")
    assert ramp_from_config(_cfg(start=16, tokens="2M", shape="steps"), PLACEMENT) == BatchRamp(2, 4, "steps")
    assert ramp_from_config(_cfg(), PLACEMENT) is None


@pytest.mark.parametrize("ramp, words", [
    ({"start": 12, "share": 0.5}, "trainer.batch_ramp.start=12: the first steps' batch, in sequences: a positive "
                                  "multiple of the microbatch of 8"),
    ({"start": 64, "share": 0.5}, "trainer.batch_ramp.start=64 is larger than global_batch_size=32"),
    ({"start": 8}, "give the ramp's length once"),
    ({"start": 8, "share": 0.5, "tokens": "1M"}, "give the ramp's length once"),
    ({"start": 8, "tokens": "1h"}, "trainer.batch_ramp.tokens='1h': expected a number of tokens"),
    ({"start": 8, "share": -1}, "trainer.batch_ramp.share=-1: a positive share"),
    ({"start": 8, "share": 0.5, "shape": "cosine"}, "trainer.batch_ramp.shape='cosine': expected one of linear, steps"),
    ({"start": 8, "share": 0.5, "over": 3}, "trainer.batch_ramp.over: not a setting of the ramp"),
])
def test_a_bad_ramp_is_one_line_naming_its_key(ramp, words):
    with pytest.raises(ConfigError, match=None) as err:
        ramp_from_config(_cfg(**ramp), PLACEMENT)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_ramp_needs_a_pre_training_run_with_a_length():
    cfg = _cfg(start=8, share=0.5)
    cfg.trainer.max_steps = -1
    with pytest.raises(ConfigError, match="needs the run's length"):
        ramp_from_config(cfg, PLACEMENT)
    cfg = _cfg(start=8, share=0.5)
    cfg.task.name = "classification"
    with pytest.raises(ConfigError, match="ramps a pre-training batch"):
        ramp_from_config(cfg, PLACEMENT)


def test_the_base_recipes_ramp_as_their_papers():
    from bert_exp.runner.placement import derive_placement
    from helpers import compose_config

    crammed = compose_config(["+experiment=pretrain_crammed_base"])
    assert ramp_from_config(crammed, derive_placement(crammed)) == BatchRamp(1, 64, "linear")  # 128 .. 8,192
    modern = compose_config(["+experiment=pretrain_modernbert_base"])
    assert ramp_from_config(modern, derive_placement(modern)) == BatchRamp(8, 48, "steps")  # 768 .. 4,608
