"""Masked-LM masking and batch collation for pre-training.

Masking follows BERT: of the non-special tokens of each sequence, ``round(masked_lm_prob * n)`` (at
least 1, at most ``max_predictions_per_seq``) are selected uniformly at random; each selected token
becomes [MASK] with probability 0.8, a random vocabulary id with 0.1 (the original draws from the whole
vocabulary), and stays unchanged with 0.1. The positions and original ids are returned padded to
``max_predictions_per_seq`` (labels -100 where unused) for the sparse MLM head.

Options bring the original's exact behaviour and the strategies after it (``data.masking``):

* ``count_special_tokens``: the original's ``round(masked_lm_prob * n)`` counts every token of the
  sequence, [CLS] and [SEP] included, though only the others can be chosen (so at length 512, 77
  rather than our 76). Off by default.
* ``strategy``: ``token`` (BERT's: each WordPiece piece on its own), ``whole_word`` (the original's
  whole-word masking, of its later models: a word and its continuation pieces (``##...``) are chosen
  together; words are taken in a random order, and one that would go past the number to predict is
  passed over; each chosen token is then replaced 80/10/10 on its own, as in the original) or ``span``
  (SpanBERT, Joshi et al. 2020: spans of whole words, their lengths in words drawn from a geometric
  distribution, ``span_p`` 0.2, truncated at ``max_span_length`` 10 (mean 3.8 words), each starting at a
  random unmasked word, until the number to predict is reached; a span never crosses [SEP] nor overlaps
  another, is shortened by words to fit the number left, and is replaced 80/10/10 as a whole). Both word
  strategies need ``continuation``, a boolean table over the vocabulary (:func:`continuation_table`); a
  word starts again after a special token.

Everything is tensor operations over the whole batch: no per-token Python loop (whole-word masking
loops over words in their random order, for the batch at once, until every row is full; span masking
loops over each row's spans).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..tokenizer import SPECIAL_TOKENS, SpecialIds

IGNORE_INDEX = -100
STRATEGIES = ("token", "whole_word", "span")


@dataclass(frozen=True)
class MaskingSettings:
    """How pre-training masks (``data.masking``): ``masked_lm_prob`` of the tokens, at most
    ``max_predictions_per_seq``; ``count_special_tokens``, ``strategy`` (``span_p`` and ``max_span_length``
    for spans) as above. ``mode``:
    ``dynamic`` (a new mask each epoch, RoBERTa's) or ``static`` (each instance's mask fixed by the
    corpus seed, as the original with ``dupe_factor`` copies)."""

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    count_special_tokens: bool = False
    strategy: str = "token"
    span_p: float = 0.2
    max_span_length: int = 10
    mode: str = "dynamic"
    whole_word: bool = False  # the earlier spelling of strategy=whole_word, kept so older runs' configs load

    def __post_init__(self):
        if self.whole_word:
            if self.strategy not in ("token", "whole_word"):
                raise ValueError(f"data.masking.whole_word=true and strategy={self.strategy}: whole_word is the "
                                 "earlier spelling of strategy=whole_word; give strategy alone")
            object.__setattr__(self, "strategy", "whole_word")
        if self.mode not in ("dynamic", "static"):
            raise ValueError(f"data.masking.mode={self.mode!r}: expected dynamic or static")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"data.masking.strategy={self.strategy!r}: expected {', '.join(STRATEGIES)}")
        if not 0 < self.span_p <= 1 or self.max_span_length < 1:
            raise ValueError(f"data.masking.span_p={self.span_p}, max_span_length={self.max_span_length}: "
                             "a probability in (0, 1] and at least one word")

    @property
    def by_words(self) -> bool:
        """Whether the strategy needs the vocabulary's word boundaries (:func:`continuation_table`)."""
        return self.strategy != "token"

    @property
    def static(self) -> bool:
        return self.mode == "static"


def continuation_table(vocab: dict[str, int], prefix: str = "##", byte_level: bool = False) -> torch.Tensor:
    """A boolean table over the vocabulary ids: True for the pieces that continue a word. WordPiece's
    start with ``##``; a byte-level BPE marks the other way round, a word's first piece with the space
    before it ("Ġ"), so every other piece continues (punctuation after a word too, as fairseq's RoBERTa)."""
    table = torch.zeros(max(vocab.values()) + 1, dtype=torch.bool)
    if byte_level:
        table[[i for token, i in vocab.items() if not token.startswith("\u0120") and token not in SPECIAL_TOKENS]] = True
    else:
        table[[i for token, i in vocab.items() if token.startswith(prefix)]] = True
    return table


def _whole_word_selection(scores: torch.Tensor, candidates: torch.Tensor, continues: torch.Tensor,
                          num_to_predict: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: whole words (a candidate start and the continuation pieces after it), taken in the
    order of their start's score, each while it fits within ``num_to_predict`` tokens."""
    batch, length = candidates.shape
    previous = torch.nn.functional.pad(candidates[:, :-1], (1, 0), value=False)
    starts = candidates & ~(continues & previous)
    word = starts.long().cumsum(dim=1) - 1  # the word of each candidate position
    word = word.masked_fill(~candidates, length)  # non-candidates: a word that is never taken
    sizes = torch.zeros(batch, length + 1, dtype=torch.long).scatter_add_(1, word, torch.ones_like(word))
    word_scores = torch.full((batch, length + 1), 2.0).scatter_(1, word.masked_fill(~starts, length),
                                                               scores.masked_fill(~starts, 2.0))
    word_scores[:, length] = 2.0
    order = word_scores.argsort(dim=1)  # words in a random order; non-words last
    taken = torch.zeros(batch, length + 1, dtype=torch.bool)
    total = torch.zeros(batch, dtype=torch.long)
    rows = torch.arange(batch)
    num_words = int(starts.sum(dim=1).max()) if batch else 0
    for k in range(num_words):
        w = order[:, k]
        size = sizes[rows, w]
        take = (word_scores[rows, w] < 2.0) & (total + size <= num_to_predict)
        taken[rows, w] = take
        total += size * take
        if bool((total >= num_to_predict).all()):
            break
    return taken.gather(1, word) & candidates


def _truncated_geometric(p: float, longest: int) -> np.ndarray:
    """The cumulative distribution of SpanBERT's span lengths: P(k) proportional to p (1 - p)^(k - 1), k = 1..longest."""
    weights = p * (1 - p) ** np.arange(longest, dtype=np.float64)
    return np.cumsum(weights / weights.sum())


def _span_length(draws: np.ndarray, cumulative: np.ndarray) -> np.ndarray:
    """Uniform draws in [0, 1) as span lengths in words (1..len(cumulative)), by the inverse distribution."""
    return np.minimum(np.searchsorted(cumulative, draws, side="right"), len(cumulative) - 1) + 1


def span_lengths(count: int, p: float, longest: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``count`` span lengths in words, from SpanBERT's geometric distribution truncated at ``longest``."""
    draws = torch.rand(count, generator=generator, dtype=torch.float64).numpy()
    return torch.from_numpy(_span_length(draws, _truncated_geometric(p, longest)))


def _span_selection(candidates: torch.Tensor, continues: torch.Tensor, num_to_predict: torch.Tensor, p: float,
                    longest: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, T] bool chosen, [B, T] long span of each chosen token, T elsewhere): SpanBERT's spans of whole
    words, each within a run of candidates, never overlapping, shortened by words to fit the number left."""
    batch, length = candidates.shape
    chosen = np.zeros((batch, length), dtype=bool)
    span_of = np.full((batch, length), length, dtype=np.int64)
    previous = torch.nn.functional.pad(candidates[:, :-1], (1, 0), value=False)
    starts = (candidates & ~(continues & previous)).numpy()
    boundaries = np.concatenate([starts | ~candidates.numpy(), np.ones((batch, 1), dtype=bool)], axis=1)
    segments = np.cumsum(~candidates.numpy(), axis=1)
    cumulative = _truncated_geometric(p, longest)
    for row in range(batch):
        word_start = np.flatnonzero(starts[row])
        budget = int(num_to_predict[row])
        if not len(word_start) or budget <= 0:
            continue
        bounds = np.flatnonzero(boundaries[row])
        word_end = bounds[np.searchsorted(bounds, word_start, side="right")]
        segment = segments[row, word_start]
        free = np.ones(len(word_start), dtype=bool)  # not masked, and might still fit
        # two draws a span (its first word, its length); a row takes at most one span a word
        draws = torch.rand(2 * len(word_start), generator=generator, dtype=torch.float64).numpy()
        spans = 0
        for pick, size in draws.reshape(-1, 2):
            open_words = np.flatnonzero(free)
            if budget <= 0 or not len(open_words):
                break
            first = open_words[min(int(pick * len(open_words)), len(open_words) - 1)]
            want = int(_span_length(np.array([size]), cumulative)[0])
            last = first
            while last - first + 1 < want and last + 1 < len(word_start) and free[last + 1] \
                    and segment[last + 1] == segment[first]:
                last += 1
            while last >= first and word_end[last] - word_start[first] > budget:
                last -= 1  # shortened by words to fit the number left
            if last < first:
                free[first] = False  # longer than the number left, which only shrinks
                continue
            begin, end = word_start[first], word_end[last]
            chosen[row, begin:end] = True
            span_of[row, begin:end] = spans
            spans += 1
            budget -= end - begin
            free[first:last + 1] = False
    return torch.from_numpy(chosen), torch.from_numpy(span_of)


def mask_tokens(
    input_ids: torch.Tensor,
    candidates: torch.Tensor,
    special: SpecialIds,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    generator: torch.Generator | None = None,
    lengths: torch.Tensor | None = None,
    continuation: torch.Tensor | None = None,
    spans: tuple[float, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids [B, T], candidates [B, T] bool (maskable tokens).

    ``lengths`` [B]: the token counts that set the number to predict (default: the candidates';
    the sequence lengths with [CLS] and [SEP] are the original's). ``continuation``: the vocabulary's
    continuation pieces (:func:`continuation_table`) for whole-word masking, or with ``spans`` (SpanBERT's
    ``(span_p, max_span_length)``) for span masking.

    Returns (masked input_ids, masked_lm_positions [B, P], masked_lm_labels [B, P]).
    """
    batch, length = input_ids.shape
    p = max_predictions_per_seq
    num_candidates = candidates.sum(dim=1)
    counted = num_candidates if lengths is None else lengths
    num_to_predict = torch.round(counted.double() * masked_lm_prob).long()
    num_to_predict = torch.minimum(num_to_predict.clamp(min=1), num_candidates).clamp(max=p)

    span_of = None
    if spans is not None and continuation is None:
        raise ValueError("span masking needs the vocabulary's word boundaries (continuation)")
    scores = torch.rand(batch, length, generator=generator) if spans is None else None
    if continuation is not None:
        continues = continuation.to(input_ids.device)[input_ids.clamp(0, len(continuation) - 1)]
        if spans is None:
            chosen = _whole_word_selection(scores, candidates, continues, num_to_predict)
        else:
            chosen, span_of = _span_selection(candidates, continues, num_to_predict, *spans, generator)
        keys = torch.where(chosen, torch.arange(length).expand(batch, length), length)
        positions = keys.sort(dim=1).values[:, : min(p, length)]
        if positions.shape[1] < p:
            positions = torch.nn.functional.pad(positions, (0, p - positions.shape[1]), value=length)
    else:
        # a random ranking of each row's candidates; non-candidates rank last
        scores.masked_fill_(~candidates, 2.0)
        order = scores.argsort(dim=1)[:, : min(p, length)]
        if order.shape[1] < p:
            order = torch.nn.functional.pad(order, (0, p - order.shape[1]))
        selected = torch.arange(p).unsqueeze(0) < num_to_predict.unsqueeze(1)
        # ascending positions, unused slots last (as the original sorts masked positions)
        positions = torch.where(selected, order, torch.full_like(order, length)).sort(dim=1).values
    selected = positions < length
    positions = positions.masked_fill(~selected, 0)

    labels = torch.where(selected, input_ids.gather(1, positions), torch.full_like(positions, IGNORE_INDEX))

    action = torch.rand(batch, p, generator=generator)
    if span_of is not None:  # SpanBERT replaces a span as a whole: one draw for all its tokens
        per_span = torch.rand(batch, length + 1, generator=generator)
        action = per_span.gather(1, span_of.gather(1, positions))
    random_ids = torch.randint(0, special.vocab_size, (batch, p), generator=generator, dtype=input_ids.dtype)
    replacement = torch.where(action < 0.8, torch.full_like(random_ids, special.mask), random_ids)
    keep = action >= 0.9
    new_values = torch.where(selected & ~keep, replacement, input_ids.gather(1, positions))
    masked = input_ids.clone()
    masked.scatter_(1, positions, new_values)
    return masked, positions, labels


class PretrainingCollator:
    """Pads a list of instances into a batch and masks it.

    Instances carrying a ``mask_seed`` are masked reproducibly: with ``static`` each by a generator of
    its own (its mask is the same in every batch and epoch), otherwise the batch by one generator
    seeded from all of them (cheaper; the dataset varies the seeds per epoch). Without seeds the
    global generator draws the masks."""

    def __init__(
        self,
        special: SpecialIds,
        masking: MaskingSettings = MaskingSettings(mode="static"),
        continuation: torch.Tensor | None = None,
        pad_to: int | None = None,
        pad_multiple: int | None = None,
    ):
        """``masking``: the settings whole (``data.masking``); ``continuation``: a :func:`continuation_table`,
        which the word strategies need; ``pad_to``: every batch that long; ``pad_multiple``: a batch's
        longest rounded up to a multiple of it (few shapes to compile)."""
        if masking.by_words and continuation is None:
            raise ValueError(f"data.masking.strategy={masking.strategy}: the collator needs the vocabulary's "
                             "word boundaries (continuation_table)")
        self.special = special
        self.masking = masking
        self.continuation = continuation if masking.by_words else None
        self.static = masking.static
        self.pad_to, self.pad_multiple = pad_to, pad_multiple

    def pad(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        length = self.pad_to or max(len(s["input_ids"]) for s in samples)
        if not self.pad_to and self.pad_multiple:
            length = -(-length // self.pad_multiple) * self.pad_multiple
        batch = len(samples)
        input_ids = np.full((batch, length), self.special.pad, dtype=np.int64)
        token_type_ids = np.zeros((batch, length), dtype=np.int64)
        attention_mask = np.zeros((batch, length), dtype=np.int64)
        for row, sample in enumerate(samples):
            n = len(sample["input_ids"])
            input_ids[row, :n] = sample["input_ids"]
            token_type_ids[row, :n] = sample["token_type_ids"]
            attention_mask[row, :n] = 1
        return {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "next_sentence_label": torch.tensor([s["next_sentence_label"] for s in samples]),
        }

    def __call__(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(samples)
        ids = batch["input_ids"]
        s = self.special
        candidates = (ids != s.pad) & (ids != s.cls) & (ids != s.sep)
        m = self.masking
        args = (s, m.masked_lm_prob, m.max_predictions_per_seq)
        lengths = batch["attention_mask"].sum(dim=1) if m.count_special_tokens else None
        extra = dict(continuation=self.continuation,
                     spans=(m.span_p, m.max_span_length) if m.strategy == "span" else None)
        if "mask_seed" in samples[0] and not self.static:
            entropy = np.random.SeedSequence([int(sample["mask_seed"]) for sample in samples]).generate_state(2)
            seed = int(entropy[0]) << 32 | int(entropy[1])
            masked, positions, labels = mask_tokens(ids, candidates, *args, lengths=lengths, **extra,
                                                    generator=torch.Generator().manual_seed(seed))
        elif "mask_seed" in samples[0]:
            rows = [
                mask_tokens(ids[i : i + 1], candidates[i : i + 1], *args, **extra,
                            lengths=None if lengths is None else lengths[i : i + 1],
                            generator=torch.Generator().manual_seed(int(sample["mask_seed"])))
                for i, sample in enumerate(samples)
            ]
            masked, positions, labels = (torch.cat(parts) for parts in zip(*rows))
        else:
            masked, positions, labels = mask_tokens(ids, candidates, *args, lengths=lengths, **extra)
        batch.update(input_ids=masked, masked_lm_positions=positions, masked_lm_labels=labels)
        return batch


class CausalLMCollator(PretrainingCollator):
    """Pads instances into a batch for left-to-right language modelling: nothing is masked; ``labels``
    are the input ids (-100 at padding), which the loss shifts to predict each next token."""

    def __init__(self, special: SpecialIds, pad_to: int | None = None, pad_multiple: int | None = None):
        super().__init__(special, pad_to=pad_to, pad_multiple=pad_multiple)

    def __call__(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        batch = self.pad(samples)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        return batch
