import time

import numpy as np
import pytest
import torch

from bert_exp.data.masking import IGNORE_INDEX, PretrainingCollator, SpecialIds, mask_tokens
from helpers import synthetic_samples

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=30522)


def test_masking_rates_over_100k_tokens():
    collator = PretrainingCollator(SPECIAL, masked_lm_prob=0.15, max_predictions_per_seq=20)
    torch.manual_seed(0)
    stats = dict(candidates=0, selected=0, as_mask=0, unchanged=0, random=0)
    for start in range(0, 2000, 64):
        samples = synthetic_samples(64, seed=start)
        batch = collator(samples)
        original = collator.pad(samples)["input_ids"]
        positions, labels = batch["masked_lm_positions"], batch["masked_lm_labels"]
        selected = labels != IGNORE_INDEX
        candidates = (original > 4)
        n_candidates = candidates.sum(1)
        expected = torch.clamp(torch.round(n_candidates * 0.15).long(), 1, 20)
        assert torch.equal(selected.sum(1), expected)  # exactly round(15 %), at most 20
        assert positions.shape[1] == 20
        sel_pos = positions[selected]
        rows = torch.arange(len(samples))[:, None].expand_as(positions)[selected]
        assert torch.all(candidates[rows, sel_pos]), "a special or padding token was selected"
        assert torch.equal(labels[selected], original[rows, sel_pos])
        for r in range(len(samples)):  # ascending, no duplicates
            p = positions[r][selected[r]]
            assert torch.all(p[1:] > p[:-1])
        now = batch["input_ids"][rows, sel_pos]
        stats["candidates"] += int(n_candidates.sum())
        stats["selected"] += int(selected.sum())
        stats["as_mask"] += int((now == 4).sum())
        stats["unchanged"] += int((now == labels[selected]).sum())
        stats["random"] += int(((now != 4) & (now != labels[selected])).sum())
        # nothing outside the selected positions changed
        changed = batch["input_ids"] != original
        changed[rows, sel_pos] = False
        assert not changed.any()
        assert torch.equal(batch["attention_mask"].bool(), original != 0)
    assert stats["candidates"] >= 100_000
    rate = stats["selected"] / stats["candidates"]
    assert abs(rate - 0.15) < 0.01, rate
    for key, target in (("as_mask", 0.8), ("unchanged", 0.1), ("random", 0.1)):
        assert abs(stats[key] / stats["selected"] - target) < 0.02, (key, stats)


def test_max_predictions_caps_long_sequences():
    ids = torch.randint(5, 1000, (4, 512))
    _, positions, labels = mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), SPECIAL, 0.15, 80)
    assert torch.all((labels != IGNORE_INDEX).sum(1) == 77)  # round(0.15 * 512) = 77 <= 80
    _, positions, labels = mask_tokens(ids, torch.ones_like(ids, dtype=torch.bool), SPECIAL, 0.15, 20)
    assert torch.all((labels != IGNORE_INDEX).sum(1) == 20)


def test_static_masking_repeats_dynamic_does_not():
    samples = synthetic_samples(16, seed=1)
    collator = PretrainingCollator(SPECIAL)
    dynamic = [collator(samples)["masked_lm_positions"] for _ in range(2)]
    assert not torch.equal(*dynamic)
    static = [dict(s, mask_seed=1000 + i) for i, s in enumerate(samples)]
    first, second = collator(static), collator(list(reversed(static)))
    assert torch.equal(first["masked_lm_positions"], second["masked_lm_positions"].flip(0))
    assert torch.equal(first["input_ids"][:, :10], collator(static)["input_ids"][:, :10])


def test_pad_to_max_length_gives_static_shapes():
    collator = PretrainingCollator(SPECIAL, pad_to=128)
    batch = collator(synthetic_samples(8, max_len=64))
    assert batch["input_ids"].shape == (8, 128) and batch["masked_lm_positions"].shape == (8, 20)


def test_collator_is_vectorised():
    """Masking a batch of 256 x 128 costs about as much as 16 x 128: no per-token Python loop."""
    collator = PretrainingCollator(SPECIAL)
    small, large = synthetic_samples(16), synthetic_samples(256)
    padded_small, padded_large = collator.pad(small)["input_ids"], collator.pad(large)["input_ids"]

    def best(ids):
        cand = ids > 4
        times = []
        for _ in range(5):
            t = time.perf_counter()
            mask_tokens(ids, cand, SPECIAL)
            times.append(time.perf_counter() - t)
        return min(times)

    per_row_small, per_row_large = best(padded_small) / 16, best(padded_large) / 256
    assert per_row_large < per_row_small  # batching amortises: the cost is not per token in Python
    assert best(padded_large) < 0.05


@pytest.mark.parametrize("length", [3, 10])
def test_short_sequences(length):
    ids = torch.randint(5, 1000, (2, length))
    ids[:, 0], ids[:, -1] = 2, 3
    cand = ids > 4
    masked, positions, labels = mask_tokens(ids, cand, SPECIAL, 0.15, 20)
    assert positions.shape == (2, 20) and torch.all((labels != IGNORE_INDEX).sum(1) >= 1)
