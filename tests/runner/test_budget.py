"""trainer.budget: parsing, and the learning-rate schedule laid over the budget's clock."""

import pytest
import torch

from bert_exp.runner.budget import BudgetClock, BudgetError, parse_budget
from bert_exp.runner.validation import ConfigError, validate_config
from bert_exp.tasks.optim import linear_warmup_decay
from helpers import compose_config


@pytest.mark.parametrize("text, kind, amount", [
    ("90s", "seconds", 90), ("10m", "seconds", 600), ("1h", "seconds", 3600), ("1.5h", "seconds", 5400),
    ("200M", "tokens", 2e8), ("500k", "tokens", 5e5), ("1.5B", "tokens", 1.5e9), ("12345", "tokens", 12345),
])
def test_parse(text, kind, amount):
    spec = parse_budget(text)
    assert (spec.kind, spec.amount) == (kind, amount)


@pytest.mark.parametrize("text", ["", "ten minutes", "10x", "0m", "-5m", "1e999"])
def test_bad_budgets_name_the_key(text):
    with pytest.raises(BudgetError, match=r"trainer.budget="):
        parse_budget(text)


def schedule_over(clock, warmup_ratio, decay="huggingface"):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = linear_warmup_decay(optimizer, total_steps=1, warmup_ratio=warmup_ratio, decay=decay,
                                    progress=clock.fraction)

    def rate_at(spent):
        clock.spent = spent
        scheduler.step()
        return optimizer.param_groups[0]["lr"]

    return rate_at


def test_schedule_follows_the_budget_not_the_steps():
    clock = BudgetClock(parse_budget("100s"))
    rate_at = schedule_over(clock, warmup_ratio=0.1)
    assert rate_at(5) == pytest.approx(0.5)  # half of the warm-up
    assert rate_at(10) == pytest.approx(1.0)  # the peak where warm-up ends
    assert rate_at(55) == pytest.approx(0.5)  # half-way down the decay: (1 - 0.55) / 0.9
    assert rate_at(100) == 0.0 and rate_at(250) == 0.0  # spent: the end value, never negative


def test_google_shape_over_the_budget():
    clock = BudgetClock(parse_budget("1000"))
    rate_at = schedule_over(clock, warmup_ratio=0.1, decay="google")
    assert rate_at(50) == pytest.approx(0.5)
    assert rate_at(100) == pytest.approx(0.9)  # 1 - p: the original's decay over the whole run
    assert rate_at(1000) == 0.0


def test_budget_needs_a_warmup_ratio_and_a_valid_amount(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer.budget=10m .*optim.scheduler.warmup_steps=null"):
        validate_config(compose_config(["+experiment=pretrain_tiny", "trainer.budget=10m"], tmp_path))
    with pytest.raises(ConfigError, match=r"trainer.budget='ten'"):
        validate_config(compose_config(["+experiment=pretrain_tiny", "trainer.budget=ten",
                                        "optim.scheduler.warmup_steps=null", "optim.scheduler.warmup_ratio=0.1"], tmp_path))
    validate_config(compose_config(["+experiment=pretrain_tiny", "trainer.budget=10m",
                                    "optim.scheduler.warmup_steps=null", "optim.scheduler.warmup_ratio=0.1"], tmp_path))
