"""The fast CPU dropout: BERT's dropout semantics at a fraction of torch's Bernoulli cost."""


import pytest
import torch

from bert_exp.model.dropout import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_drop_rate_and_expectation(p):
    torch.manual_seed(0)
    x = torch.rand(2_000_000) + 0.5
    y = dropout(x, p, training=True)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 0.002  # p is rounded to a multiple of 2**-15
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.003  # survivors are rescaled
    kept = y != 0
    assert torch.allclose(y[kept], x[kept] / (1 - round(p * 2**15) / 2**15))


def test_gradient_flows_through_survivors_only():
    torch.manual_seed(1)
    x = torch.randn(64, 128, requires_grad=True)
    y = dropout(x, 0.1, training=True)
    y.sum().backward()
    scale = y[y != 0][0] / x[y != 0][0]
    assert torch.equal(x.grad == 0, y == 0)
    assert torch.allclose(x.grad[y != 0], scale.expand_as(x.grad[y != 0]))


def test_eval_and_seeded_repeatability():
    x = torch.randn(1000)
    module = Dropout(0.1).eval()
    assert module(x) is x
    module.train()
    torch.manual_seed(3)
    a = module(x)
    torch.manual_seed(3)
    assert torch.equal(a, module(x))
