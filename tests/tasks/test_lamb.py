"""LAMB's update (You et al. 2019, Algorithm 2) step by step on a small problem, its two trust-ratio
rules (apex's FusedLAMB default and the paper's every-tensor rule), and the preset that selects it."""

import math

import pytest
import torch

from bert_exp.tasks import Lamb, parameter_groups

LR, BETAS, EPS, DECAY = 0.05, (0.9, 0.99), 1e-6, 0.1


def paper_steps(weights: list[list[float]], grads: list[list[list[float]]], decays: list[float], adapt: list[bool]):
    """Algorithm 2 written out in floats, tensor by tensor: Adam's moments with bias correction,
    r = m_hat / (sqrt(v_hat) + eps), u = r + decay * w, w -= lr * (||w|| / ||u||) * u (1 where a norm is 0,
    or where the tensor is not adapted)."""
    weights = [list(w) for w in weights]
    m = [[0.0] * len(w) for w in weights]
    v = [[0.0] * len(w) for w in weights]
    for t, step_grads in enumerate(grads, start=1):
        for i, g in enumerate(step_grads):
            m[i] = [BETAS[0] * a + (1 - BETAS[0]) * b for a, b in zip(m[i], g)]
            v[i] = [BETAS[1] * a + (1 - BETAS[1]) * b * b for a, b in zip(v[i], g)]
            u = [(a / (1 - BETAS[0] ** t)) / (math.sqrt(b / (1 - BETAS[1] ** t)) + EPS) + decays[i] * w
                 for a, b, w in zip(m[i], v[i], weights[i])]
            w_norm, u_norm = math.sqrt(sum(x * x for x in weights[i])), math.sqrt(sum(x * x for x in u))
            ratio = w_norm / u_norm if adapt[i] and w_norm > 0 and u_norm > 0 else 1.0
            weights[i] = [w - LR * ratio * x for w, x in zip(weights[i], u)]
    return weights


@pytest.mark.parametrize("adapt_without_decay", [False, True])
def test_each_step_is_the_papers_update(adapt_without_decay):
    torch.manual_seed(0)
    start = [torch.randn(6).tolist(), torch.randn(3).tolist(), [0.0, 0.0]]  # a weight, a "bias", zeros
    grads = [[torch.randn(len(w)).tolist() for w in start] for _ in range(5)]
    params = [torch.nn.Parameter(torch.tensor(w, dtype=torch.float64)) for w in start]
    optimizer = Lamb([{"params": [params[0]], "weight_decay": DECAY},
                      {"params": params[1:], "weight_decay": 0.0}],
                     lr=LR, betas=BETAS, eps=EPS, adapt_without_decay=adapt_without_decay)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
    expected = paper_steps(start, grads, decays=[DECAY, 0.0, 0.0], adapt=[True, adapt_without_decay, adapt_without_decay])
    for p, w in zip(params, expected):
        torch.testing.assert_close(p.detach(), torch.tensor(w, dtype=torch.float64), rtol=1e-6, atol=1e-9)


def test_a_layer_moves_by_about_lr_of_its_norm_whatever_the_gradients_scale():
    """The trust ratio: the step's norm is lr * ||w|| for gradients a million times apart."""
    moved = []
    for scale in (1e-3, 1e3):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(64))
        before = w.detach().clone()
        optimizer = Lamb([w], lr=0.01, weight_decay=0.0, adapt_without_decay=True)
        w.grad = torch.randn(64) * scale
        optimizer.step()
        moved.append(((w.detach() - before).norm() / before.norm()).item())
    assert moved == pytest.approx([0.01, 0.01], rel=1e-4)


def test_it_fits_a_small_regression_with_bert_s_parameter_groups():
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.5
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = Lamb(parameter_groups(model, weight_decay=0.01), lr=0.02)
    first = None
    for _ in range(300):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        first = first if first is not None else loss.item()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05 * first


def test_a_bad_setting_is_one_line():
    with pytest.raises(ValueError, match="LAMB needs lr > 0"):
        Lamb([torch.nn.Parameter(torch.zeros(2))], lr=0.0)
