"""Masked-LM masking and batch collation for pre-training.

Masking follows BERT: of the non-special tokens of each sequence, ``round(masked_lm_prob * n)`` (at
least 1, at most ``max_predictions_per_seq``) are selected uniformly at random; each selected token
becomes [MASK] with probability 0.8, a random vocabulary id with 0.1 (the original draws from the whole
vocabulary), and stays unchanged with 0.1. The positions and original ids are returned padded to
``max_predictions_per_seq`` (labels -100 where unused) for the sparse MLM head.

Two options bring the original's later or exact behaviour:

* ``count_special_tokens``: the original's ``round(masked_lm_prob * n)`` counts every token of the
  sequence, [CLS] and [SEP] included, though only the others can be chosen (so at length 512, 77
  rather than our 76). Off by default.
* ``whole_word`` (the original's whole-word masking, of its later models): a word and its WordPiece
  continuation pieces (``##...``) are chosen together; words are taken in a random order, and one that
  would go past the number to predict is passed over. Needs ``continuation``, a boolean table over the
  vocabulary (:func:`continuation_table`). Each chosen token is then replaced 80/10/10 on its own, as
  in the original. A word starts again after a special token.

Everything is tensor operations over the whole batch: no per-token Python loop (whole-word masking
loops over words in their random order, for the batch at once, until every row is full).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..tokenizer import SPECIAL_TOKENS, SpecialIds

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingSettings:
    """How pre-training masks (``data.masking``): ``masked_lm_prob`` of the tokens, at most
    ``max_predictions_per_seq``; ``count_special_tokens`` and ``whole_word`` as above. ``mode``:
    ``dynamic`` (a new mask each epoch, RoBERTa's) or ``static`` (each instance's mask fixed by the
    corpus seed, as the original with ``dupe_factor`` copies)."""

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    count_special_tokens: bool = False
    whole_word: bool = False
    mode: str = "dynamic"

    def __post_init__(self):
        if self.mode not in ("dynamic", "static"):
            raise ValueError(f"data.masking.mode={self.mode!r}: expected dynamic or static")

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


def mask_tokens(
    input_ids: torch.Tensor,
    candidates: torch.Tensor,
    special: SpecialIds,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    generator: torch.Generator | None = None,
    lengths: torch.Tensor | None = None,
    continuation: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids [B, T], candidates [B, T] bool (maskable tokens).

    ``lengths`` [B]: the token counts that set the number to predict (default: the candidates';
    the sequence lengths with [CLS] and [SEP] are the original's). ``continuation``: the vocabulary's
    continuation pieces (:func:`continuation_table`) for whole-word masking.

    Returns (masked input_ids, masked_lm_positions [B, P], masked_lm_labels [B, P]).
    """
    batch, length = input_ids.shape
    p = max_predictions_per_seq
    num_candidates = candidates.sum(dim=1)
    counted = num_candidates if lengths is None else lengths
    num_to_predict = torch.round(counted.double() * masked_lm_prob).long()
    num_to_predict = torch.minimum(num_to_predict.clamp(min=1), num_candidates).clamp(max=p)

    scores = torch.rand(batch, length, generator=generator)
    if continuation is not None:
        continues = continuation.to(input_ids.device)[input_ids.clamp(0, len(continuation) - 1)]
        chosen = _whole_word_selection(scores, candidates, continues, num_to_predict)
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
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int = 20,
        pad_to: int | None = None,
        static: bool = True,
        count_special_tokens: bool = False,
        continuation: torch.Tensor | None = None,
        pad_multiple: int | None = None,
    ):
        """``count_special_tokens``: the number to predict counts [CLS] and [SEP] (the original's);
        ``continuation``: a :func:`continuation_table` turns whole-word masking on; ``pad_to``: every batch
        that long; ``pad_multiple``: a batch's longest rounded up to a multiple of it (few shapes to compile)."""
        self.special = special
        self.count_special_tokens = count_special_tokens
        self.continuation = continuation
        self.static = static
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
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
        args = (s, self.masked_lm_prob, self.max_predictions_per_seq)
        lengths = batch["attention_mask"].sum(dim=1) if self.count_special_tokens else None
        extra = dict(continuation=self.continuation)
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
