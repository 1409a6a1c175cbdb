"""Masked-LM masking and batch collation for pre-training.

Masking follows BERT: of the non-special tokens of each sequence, ``round(masked_lm_prob * n)`` (at
least 1, at most ``max_predictions_per_seq``) are selected uniformly at random; each selected token
becomes [MASK] with probability 0.8, a random vocabulary id with 0.1 (the original draws from the whole
vocabulary), and stays unchanged with 0.1. The positions and original ids are returned padded to
``max_predictions_per_seq`` (labels -100 where unused) for the sparse MLM head.

Everything is tensor operations over the whole batch: no per-token Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

IGNORE_INDEX = -100


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int


def mask_tokens(
    input_ids: torch.Tensor,
    candidates: torch.Tensor,
    special: SpecialIds,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int = 20,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids [B, T], candidates [B, T] bool (maskable tokens).

    Returns (masked input_ids, masked_lm_positions [B, P], masked_lm_labels [B, P]).
    """
    batch, length = input_ids.shape
    p = max_predictions_per_seq
    num_candidates = candidates.sum(dim=1)
    num_to_predict = torch.round(num_candidates.double() * masked_lm_prob).long()
    num_to_predict = torch.minimum(num_to_predict.clamp(min=1), num_candidates).clamp(max=p)

    # a random ranking of each row's candidates; non-candidates rank last
    scores = torch.rand(batch, length, generator=generator)
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
    ):
        self.special = special
        self.static = static
        self.masked_lm_prob = masked_lm_prob
        self.max_predictions_per_seq = max_predictions_per_seq
        self.pad_to = pad_to

    def pad(self, samples: list[dict]) -> dict[str, torch.Tensor]:
        length = self.pad_to or max(len(s["input_ids"]) for s in samples)
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
        if "mask_seed" in samples[0] and not self.static:
            entropy = np.random.SeedSequence([int(sample["mask_seed"]) for sample in samples]).generate_state(2)
            seed = int(entropy[0]) << 32 | int(entropy[1])
            masked, positions, labels = mask_tokens(ids, candidates, *args, generator=torch.Generator().manual_seed(seed))
        elif "mask_seed" in samples[0]:
            rows = [
                mask_tokens(ids[i : i + 1], candidates[i : i + 1], *args,
                            generator=torch.Generator().manual_seed(int(sample["mask_seed"])))
                for i, sample in enumerate(samples)
            ]
            masked, positions, labels = (torch.cat(parts) for parts in zip(*rows))
        else:
            masked, positions, labels = mask_tokens(ids, candidates, *args)
        batch.update(input_ids=masked, masked_lm_positions=positions, masked_lm_labels=labels)
        return batch
