import time

import numpy as np
import pytest
import torch

from bert_exp.data.corpus.masking import IGNORE_INDEX, MaskingSettings, PretrainingCollator, mask_tokens
from bert_exp.data.tokenizer import SpecialIds
from helpers import synthetic_samples

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=30522)


def test_masking_rates_over_100k_tokens():
    collator = PretrainingCollator(SPECIAL, MaskingSettings(masked_lm_prob=0.15, max_predictions_per_seq=20, mode="static"))
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


@pytest.mark.perf  # timing: skipped by default, `pytest -m perf` runs it
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


def test_count_special_tokens_as_the_original():
    """512 tokens, 3 of them [CLS]/[SEP]: round(0.15 * 509) = 76 of the candidates; the original's
    round(0.15 * 512) = 77 counts the specials too (still choosing among the candidates)."""
    ids = torch.randint(5, 1000, (4, 512))
    ids[:, 0], ids[:, 300], ids[:, 511] = 2, 3, 3
    sample = [{"input_ids": row.numpy(), "token_type_ids": np.zeros(512, dtype=int), "next_sentence_label": 0}
              for row in ids]
    ours = PretrainingCollator(SPECIAL, MaskingSettings(max_predictions_per_seq=80, mode="static"))(sample)
    google = PretrainingCollator(SPECIAL, MaskingSettings(max_predictions_per_seq=80, count_special_tokens=True, mode="static"))(sample)
    assert ((ours["masked_lm_labels"] != IGNORE_INDEX).sum(1) == 76).all()
    assert ((google["masked_lm_labels"] != IGNORE_INDEX).sum(1) == 77).all()
    chosen = google["masked_lm_positions"][google["masked_lm_labels"] != IGNORE_INDEX]
    assert not ((chosen == 0) | (chosen == 300) | (chosen == 511)).any()
    # padding does not count
    short = [{"input_ids": np.r_[2, np.arange(10, 27), 3], "token_type_ids": np.zeros(19, dtype=int),
              "next_sentence_label": 0}, sample[0]]
    batch = PretrainingCollator(SPECIAL, MaskingSettings(max_predictions_per_seq=80, count_special_tokens=True, mode="static"))(short)
    assert (batch["masked_lm_labels"] != IGNORE_INDEX).sum(1).tolist() == [3, 77]  # round(2.85), not round(17 * .15)


def test_continuation_table():
    from bert_exp.data.corpus.masking import continuation_table

    table = continuation_table({"[PAD]": 0, "play": 1, "##ing": 2, "##s": 3, "run": 5})
    assert table.tolist() == [False, False, True, True, False, False]


def test_whole_word_masking_takes_all_pieces_of_a_word_or_none():
    """Hand-made words: id 100+k starts a word, 900+ are ## pieces (words of 1 to 4 pieces)."""
    from bert_exp.data.corpus.masking import continuation_table

    vocab = {f"w{k}": 100 + k for k in range(50)} | {f"##p{k}": 900 + k for k in range(50)}
    table = continuation_table(vocab)
    rng = np.random.default_rng(0)
    sizes = [int(n) for n in rng.integers(1, 5, size=40)]
    words = [[100 + k % 50] + [900 + (k + j) % 50 for j in range(1, n)] for k, n in enumerate(sizes)]
    pieces = [t for w in words for t in w]
    ids = torch.tensor([[2, *pieces[:60], 3, *pieces[60:], 3]])
    # the word each position belongs to (-1: [CLS]/[SEP])
    word_of = [-1] + [k for k, w in enumerate(words) for _ in w][:60] + [-1] + \
        [k for k, w in enumerate(words) for _ in w][60:] + [-1]
    # a word cut by the [SEP] after 60 pieces is two words
    cut = word_of[60]
    word_of = [w + 1000 if (w == cut and i > 61) else w for i, w in enumerate(word_of)]
    candidates = (ids != 2) & (ids != 3)
    counts = []
    for seed in range(200):
        masked, positions, labels = mask_tokens(ids, candidates, SPECIAL, 0.15, 40, continuation=table,
                                                generator=torch.Generator().manual_seed(seed))
        chosen = set(positions[labels != IGNORE_INDEX].tolist())
        assert all(word_of[i] != -1 for i in chosen)
        chosen_words = {word_of[i] for i in chosen}
        for w in chosen_words:
            assert {i for i, v in enumerate(word_of) if v == w} <= chosen, "part of a word masked"
        target = round(0.15 * int(candidates.sum()))
        assert len(chosen) <= target
        assert target - len(chosen) < 4  # only words that would overshoot are passed over
        counts.append(len(chosen_words))
        assert torch.equal(labels[labels != IGNORE_INDEX], ids[0, positions[labels != IGNORE_INDEX]])
    assert len(set(counts)) > 1  # the words differ between draws
    # without the table the same call masks single pieces
    _, positions, labels = mask_tokens(ids, candidates, SPECIAL, 0.15, 40, generator=torch.Generator().manual_seed(0))
    assert (labels != IGNORE_INDEX).sum() == round(0.15 * int(candidates.sum()))


def test_whole_word_masking_in_the_collator_over_a_batch():
    from bert_exp.data.corpus.masking import continuation_table

    table = continuation_table({f"##{k}": k for k in range(5000, 30522)} | {"a": 5})
    samples = synthetic_samples(32, seed=3)  # ids 5..30521: about 5 in 6 are ## pieces, long words
    batch = PretrainingCollator(SPECIAL, MaskingSettings(strategy="whole_word", mode="static"), table)(samples)
    labels, positions = batch["masked_lm_labels"], batch["masked_lm_positions"]
    for row, sample in enumerate(samples):
        original = torch.as_tensor(sample["input_ids"])
        chosen = positions[row][labels[row] != IGNORE_INDEX]
        is_chosen = torch.zeros(len(original), dtype=torch.bool)
        is_chosen[chosen] = True
        piece = table[original] & torch.cat([torch.tensor([False]), (original[:-1] > 3)])
        # a ## piece is chosen exactly when the token before it is
        assert torch.equal(is_chosen[1:][piece[1:]], is_chosen[:-1][piece[1:]])


def test_span_lengths_follow_spanberts_truncated_geometric_distribution():
    """SpanBERT: P(k) proportional to 0.2 * 0.8^(k-1) for k = 1..10, a mean of 3.8 words (its paper's figure)."""
    from bert_exp.data.corpus.masking import span_lengths

    weights = [0.2 * 0.8 ** (k - 1) for k in range(1, 11)]
    mean = sum(k * w for k, w in zip(range(1, 11), weights)) / sum(weights)
    assert round(mean, 1) == 3.8
    drawn = span_lengths(200_000, 0.2, 10, torch.Generator().manual_seed(0))
    assert drawn.min() == 1 and drawn.max() == 10
    assert abs(drawn.double().mean().item() - mean) < 0.02
    shares = torch.bincount(drawn, minlength=11)[1:].double() / len(drawn)
    assert torch.allclose(shares, torch.tensor(weights, dtype=torch.float64) / sum(weights), atol=0.005)


def test_span_masking_keeps_words_whole_stays_within_segments_and_meets_the_budget():
    """Hand-made words of 1 to 4 pieces in two segments: every span is whole words of one segment, spans do
    not overlap, at most 10 words, replaced 80/10/10 as a whole, and the masked count is the budget unless
    every word left is longer than what remains of it."""
    from bert_exp.data.corpus.masking import _span_selection, continuation_table

    vocab = {f"w{k}": 100 + k for k in range(50)} | {f"##p{k}": 900 + k for k in range(50)}
    table = continuation_table(vocab)
    rng = np.random.default_rng(0)
    sizes = [int(n) for n in rng.integers(1, 5, size=60)]
    words = [[100 + k % 50] + [900 + (k + j) % 50 for j in range(1, n)] for k, n in enumerate(sizes)]
    first, second = [t for w in words[:30] for t in w], [t for w in words[30:] for t in w]
    ids = torch.tensor([[2, *first, 3, *second, 3]])
    word_of = [-1] + [k for k, w in enumerate(words[:30]) for _ in w] + [-1] + \
        [k for k, w in enumerate(words[30:], start=30) for _ in w] + [-1]
    segment_of = [0] * (len(first) + 2) + [1] * (len(second) + 1)
    candidates = (ids != 2) & (ids != 3)
    continues = table[ids.clamp(0, len(table) - 1)]
    settings = MaskingSettings(strategy="span", max_predictions_per_seq=80)
    kinds = {"mask": 0, "kept": 0, "random": 0}
    for seed in range(300):
        for budget in (round(0.15 * int(candidates.sum())), 40):
            chosen, span_of = _span_selection(candidates, continues, torch.tensor([budget]), 0.2, 10,
                                              torch.Generator().manual_seed(seed))
            chosen_at = chosen[0].nonzero().flatten().tolist()
            assert len(chosen_at) <= budget
            for span in set(span_of[0][chosen[0]].tolist()):
                at = (span_of[0] == span).nonzero().flatten().tolist()
                assert at == list(range(at[0], at[-1] + 1))  # contiguous
                assert len({segment_of[i] for i in at}) == 1  # never across [SEP]
                span_words = {word_of[i] for i in at}
                assert len(span_words) <= 10
                for w in span_words:  # whole words
                    assert {i for i, v in enumerate(word_of) if v == w} <= set(at)
            left = budget - len(chosen_at)
            masked_words = {word_of[i] for i in chosen_at}
            assert left == 0 or all(sizes[w] > left for w in range(60) if w not in masked_words), (seed, left)
        masked, positions, labels = mask_tokens(ids, candidates, SPECIAL, 0.15, 80, continuation=table,
                                                spans=(0.2, 10), generator=torch.Generator().manual_seed(seed))
        chosen_at = positions[labels != IGNORE_INDEX]
        assert torch.equal(labels[labels != IGNORE_INDEX], ids[0, chosen_at])
        budget = round(0.15 * int(candidates.sum()))  # mask_tokens' own draws, repeated from the same seed
        _, span_of = _span_selection(candidates, continues, torch.tensor([budget]), 0.2, 10,
                                     torch.Generator().manual_seed(seed))
        assert set(span_of[0].lt(ids.shape[1]).nonzero().flatten().tolist()) == set(chosen_at.tolist())
        for span in set(span_of[0][span_of[0] < ids.shape[1]].tolist()):  # one replacement per span
            at = (span_of[0] == span).nonzero().flatten()
            now, was = masked[0, at], ids[0, at]
            kind = {"mask" if bool((now == SPECIAL.mask).all()) else "kept" if bool((now == was).all())
                    else "random" if bool(((now != SPECIAL.mask) & (now != was)).all()) else "mixed"}
            assert kind != {"mixed"}, (seed, span)
            kinds[kind.pop()] += 1
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.04 and abs(kinds["kept"] / total - 0.1) < 0.03, kinds
    batch = PretrainingCollator(SPECIAL, settings, table)(
        [{"input_ids": ids[0].tolist(), "token_type_ids": [0] * ids.shape[1], "next_sentence_label": 0}])
    assert (batch["masked_lm_labels"] != IGNORE_INDEX).sum() == round(0.15 * int(candidates.sum()))


def test_a_word_strategy_without_word_boundaries_or_a_bad_setting_is_refused():
    with pytest.raises(ValueError, match=r"data.masking.strategy=span: the collator needs the vocabulary's word"):
        PretrainingCollator(SPECIAL, MaskingSettings(strategy="span"))
    with pytest.raises(ValueError, match=r"data.masking.strategy='ngram': expected token, whole_word, span"):
        MaskingSettings(strategy="ngram")
    with pytest.raises(ValueError, match=r"data.masking.span_p=0"):
        MaskingSettings(span_p=0)



def test_whole_word_is_the_earlier_spelling_of_the_strategy():
    """Runs recorded before data.masking.strategy carry data.masking.whole_word: their configs still load."""
    assert MaskingSettings(whole_word=True).strategy == "whole_word"
    with pytest.raises(ValueError, match=r"whole_word=true and strategy=span: whole_word is the earlier spelling"):
        MaskingSettings(whole_word=True, strategy="span")
