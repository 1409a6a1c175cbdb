"""The input pipeline is never the bottleneck: collating a batch costs a small fraction of a step."""

import time

import pytest
import torch

from bert_exp.tools.bench.steps import build_ours, loss_ours, make_step, random_batch
from bert_exp.data import PretrainingCollator, SpecialIds
from bert_exp.model import BertConfig
from helpers import synthetic_samples

pytestmark = pytest.mark.perf  # timing: run with `pytest -m perf` on an otherwise idle machine

TINY = BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512)


def best_seconds(f, repeats=5):
    f()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def test_collating_costs_under_5_percent_of_the_smallest_models_step():
    samples = synthetic_samples(32, max_len=128)
    special = SpecialIds(0, 2, 3, 4, 30522)
    dynamic = PretrainingCollator(special)
    static = PretrainingCollator(special)
    static_samples = [{**s, "mask_seed": i} for i, s in enumerate(samples)]
    torch.manual_seed(0)
    step = make_step("pretraining", build_ours("pretraining", TINY), loss_ours, random_batch(TINY, 32, 128, 20),
                     "32-true", torch.device("cpu"), fused=True)
    step_seconds = best_seconds(step, repeats=3)
    for name, collate in (("dynamic", lambda: dynamic(samples)), ("static", lambda: static(static_samples))):
        seconds = best_seconds(collate)
        assert seconds < 0.05 * step_seconds, f"{name} masking: {seconds * 1e3:.1f} ms, step {step_seconds * 1e3:.0f} ms"

