"""Samplers: training orders that shard across processes and resume mid-epoch; evaluation shards that
see each example exactly once.

Our DataModules shard their own data (the trainer runs with ``use_distributed_sampler: false``).
Lightning's wrapper would shuffle a length-grouped order again and pad evaluation sets with repeated
examples; these samplers keep batches of like length under DDP and count every example once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch


def process_group(trainer=None) -> tuple[int, int]:
    """(world size, global rank) of the trainer a DataModule is attached to; (1, 0) without one."""
    if trainer is None:
        return 1, 0
    return trainer.world_size, trainer.global_rank


class TrainingSampler(torch.utils.data.Sampler[int]):
    """A seeded random order per epoch, sharded by global step, that can start part-way into an epoch.

    The epoch's order is cut into global steps of ``batch_size * world_size`` examples; rank r takes
    the r-th ``batch_size`` slice of each, so a length-grouped step gives every rank like lengths. A
    last partial step is dropped with ``drop_last``; otherwise it is padded from the epoch's start under
    DDP (every rank needs as many batches) and kept as it is in one process. ``skip_batches`` (set when a run resumes) drops the steps an
    interrupted run had done, for the next epoch only. With ``tag_epoch`` the sampler yields
    ``epoch * n + index`` so a dataset can derive per-epoch randomness (dynamic masks) from the index.
    """

    def __init__(self, lengths: Sequence[int] | int, batch_size: int, seed: int = 0, group_by_length: bool = False,
                 group_batches: int = 50, world_size: int = 1, rank: int = 0, tag_epoch: bool = False,
                 drop_last: bool = False):
        self.n = lengths if isinstance(lengths, int) else len(lengths)
        self.lengths = None if isinstance(lengths, int) else torch.as_tensor(list(lengths))
        if group_by_length and self.lengths is None:
            raise ValueError("group_by_length needs the examples' lengths")
        self.batch_size, self.seed, self.group_by_length = batch_size, seed, group_by_length
        self.group_batches, self.world_size, self.rank, self.tag_epoch = group_batches, world_size, rank, tag_epoch
        self.drop_last = drop_last
        self.epoch = 0
        self.skip_batches = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """Continue an interrupted run: epoch ``epoch`` with its first ``batches_done`` batches done."""
        if batches_done >= self.num_batches:
            epoch, batches_done = epoch + 1, 0
        self.epoch, self.skip_batches = epoch, batches_done

    @property
    def step_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def num_batches(self) -> int:
        """Batches per epoch on each rank."""
        return self.n // self.step_size if self.drop_last else math.ceil(self.n / self.step_size)

    def __len__(self) -> int:
        if self.world_size == 1 and not self.drop_last:
            return self.n
        return self.num_batches * self.batch_size

    def epoch_order(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.n, generator=generator)
        if not self.group_by_length:
            return order
        # transformers' group_by_length: sort chunks of the random order by length, shuffle the batches
        group = self.step_size * self.group_batches
        steps = []
        for start in range(0, self.n, group):
            members = order[start : start + group]
            members = members[torch.argsort(self.lengths[members], descending=True, stable=True)]
            steps.extend(members.split(self.step_size))
        shuffled = [steps[i] for i in torch.randperm(len(steps), generator=generator).tolist()]
        # a partial step goes last, so every batch before it stays whole
        return torch.cat(sorted(shuffled, key=lambda step: len(step) < self.step_size))

    def __iter__(self) -> Iterator[int]:
        order = self.epoch_order()
        if self.drop_last:
            order = order[: self.num_batches * self.step_size]
        elif self.world_size > 1 and len(order) % self.step_size:  # pad the last step from the start
            order = torch.cat([order, order[: self.step_size - len(order) % self.step_size]])
        skip, self.skip_batches = self.skip_batches, 0
        offset = self.epoch * self.n if self.tag_epoch else 0
        for start in range(skip * self.step_size, len(order), self.step_size):
            step = order[start : start + self.step_size]
            mine = step[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
            yield from (mine + offset).tolist()


class EvaluationSampler(torch.utils.data.Sampler[int]):
    """Rank r evaluates examples r, r + world, r + 2 world, ...: every example once, none repeated."""

    def __init__(self, n: int, world_size: int = 1, rank: int = 0):
        self.indices = range(rank, n, world_size)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)
