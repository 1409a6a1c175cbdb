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


@pytest.mark.parametrize("steps", [25, 26, 1000])
def test_ratios_that_add_up_to_one_warm_up_then_decay_at_any_length(steps):
    """MosaicBERT's 6 % warm-up and 94 % decay: no stable part, whichever way the two round."""
    lr = factors(steps, warmup_ratio=0.06, decay_ratio=0.94, decay_shape="linear", final_lr_ratio=0.02)
    peak = lr.index(1.0)  # the warm-up's last step; the decay starts from the peak on the next
    assert lr.count(1.0) <= 2
    assert all(a < b for a, b in zip(lr[:peak], lr[1 : peak + 1]))
    assert all(a >= b for a, b in zip(lr[peak:], lr[peak + 1 :])) and lr[-1] > 0.02


def test_a_budget_without_a_decay_holds_the_peak_to_its_end():
    spent = [0.0]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_stable_decay(optimizer, total_steps=1, warmup_ratio=0.1, decay_ratio=0.0,
                                   progress=lambda: spent[0])
    for p in (0.5, 1.0):
        spent[0] = p
        optimizer.step()
        schedule.step()
        assert optimizer.param_groups[0]["lr"] == 1.0


def test_a_run_shorter_than_its_warm_up_warms_up_to_its_end():
    assert factors(4, warmup_steps=100, decay_ratio=0.1) == pytest.approx([0.01, 0.02, 0.03, 0.04])


def test_settings_that_contradict_are_one_line():
    with pytest.raises(ValueError, match="warmup_ratio=0.5 runs into the decay"):
        factors(100, warmup_ratio=0.5, decay_ratio=0.6)
    with pytest.raises(ValueError, match="decay_shape='step'"):
        factors(100, warmup_steps=5, decay_shape="step")
    with pytest.raises(ValueError, match="not both"):
        factors(100, warmup_steps=5, warmup_ratio=0.1)


def test_cramming_s_triangle_is_a_warm_up_from_a_quarter_and_no_stable_part():
    """cramming's budget-triangle2 (JonasGeiping/cramming schedulers.py, commit 19b4d49):
    min(0.25 + p, 4 - 4p) over the budget's fraction p."""
    spent = [0.0]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_stable_decay(optimizer, total_steps=1, warmup_ratio=0.75, decay_ratio=0.25,
                                   decay_shape="linear", initial_lr_ratio=0.25, progress=lambda: spent[0])
    for p in (0.0, 0.3, 0.6, 0.75, 0.8, 0.95, 1.0):
        spent[0] = p
        optimizer.step()
        schedule.step()
        assert optimizer.param_groups[0]["lr"] == pytest.approx(min(0.25 + p, 4 - 4 * p)), p
