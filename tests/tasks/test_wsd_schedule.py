"""The warm-up, stable, decay schedule: its shape over steps and over a budget, and its config."""

import math

import pytest
import torch

from bert_exp.tasks import warmup_stable_decay


def factors(steps: int = 100, **kw) -> list[float]:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_stable_decay(optimizer, total_steps=steps, **kw)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return out


def test_warm_up_then_the_peak_then_one_minus_sqrt_down_to_the_floor():
    lr = factors(100, warmup_steps=10, decay_ratio=0.2, decay_shape="1-sqrt", final_lr_ratio=0.1)
    assert lr[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lr[10:80] == [1.0] * 70  # stable
    assert lr[80:] == pytest.approx([0.1 + 0.9 * (1 - math.sqrt((s - 80) / 20)) for s in range(80, 100)])
    assert all(a >= b for a, b in zip(lr[80:], lr[81:]))


@pytest.mark.parametrize("shape, halfway", [("linear", 0.5), ("cosine", 0.5), ("1-sqrt", 1 - math.sqrt(0.5))])
def test_each_decay_shape_halfway(shape, halfway):
    lr = factors(100, warmup_ratio=0.1, decay_ratio=0.5, decay_shape=shape)
    assert lr[75] == pytest.approx(halfway)


def test_over_a_budget_the_fractions_are_of_the_budget():
    spent = [0.0]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule = warmup_stable_decay(optimizer, total_steps=1, warmup_ratio=0.1, decay_ratio=0.2,
                                   decay_shape="linear", progress=lambda: spent[0])
    seen = {}
    for p in (0.05, 0.5, 0.9, 1.0):
        spent[0] = p
        optimizer.step()
        schedule.step()
        seen[p] = optimizer.param_groups[0]["lr"]
    assert seen == pytest.approx({0.05: 1.0, 0.5: 2.0, 0.9: 1.0, 1.0: 0.0})


def test_settings_that_contradict_are_one_line():
    with pytest.raises(ValueError, match="warm-up steps run into the decay"):
        factors(100, warmup_steps=50, decay_ratio=0.6)
    with pytest.raises(ValueError, match="decay_shape='step'"):
        factors(100, warmup_steps=5, decay_shape="step")
    with pytest.raises(ValueError, match="not both"):
        factors(100, warmup_steps=5, warmup_ratio=0.1)
