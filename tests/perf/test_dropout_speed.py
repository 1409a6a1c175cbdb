"""Timing checks: run with `pytest -m perf` on an otherwise idle machine (CI skips them)."""

import time

import pytest
import torch
import torch.nn.functional as F

from bert_exp.model.dropout import dropout

pytestmark = pytest.mark.perf


def test_faster_than_torch_dropout():
    x = torch.randn(32, 128, 768)

    def best(f):
        f()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return min(times)

    ours = best(lambda: dropout(x, 0.1, True))
    theirs = best(lambda: F.dropout(x, 0.1, True))
    assert ours < theirs / 1.5, (ours, theirs)
