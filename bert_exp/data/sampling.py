"""Length-grouped sampling: batches of similar lengths, so dynamic padding wastes little."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch


class LengthGroupedSampler(torch.utils.data.Sampler[int]):
    """A random order in which neighbours have similar lengths.

    The examples are shuffled, cut into groups of ``batch_size * group_batches``, each group sorted by
    length and cut into batches, and the batches shuffled: batches are random in content and order, but
    each holds examples of like length (transformers' ``group_by_length``). Lightning calls
    ``set_epoch``, so each epoch has its own order; under DDP it shards this order across ranks.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, group_batches: int = 50, seed: int = 0):
        self.lengths = torch.as_tensor(list(lengths))
        self.batch_size, self.group_batches, self.seed = batch_size, group_batches, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.lengths), generator=generator)
        group = self.batch_size * self.group_batches
        batches = []
        for start in range(0, len(order), group):
            members = order[start : start + group]
            members = members[torch.argsort(self.lengths[members], descending=True, stable=True)]
            batches.extend(members.split(self.batch_size))
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield from batches[index].tolist()
