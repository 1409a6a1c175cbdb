"""Prepared pre-training data streamed in training: from a local directory or an object store, in
Lightning's litdata chunk format (prepared by :mod:`bert_exp.data.corpus.preparation`, checked by
:mod:`bert_exp.data.corpus.integrity`).

Training streams ``train/`` with :class:`StreamedInstances` (litdata's ``StreamingDataset``: its chunks are
shuffled each epoch and shared out among the ranks and their loader workers); validation reads ``val/`` by
index (:class:`PreparedInstances`), so each example is seen exactly once across ranks. Every field of every
item read is checked (:class:`.integrity.ItemRules`), and an object store's chunk against its sha256 once
after it is downloaded (:class:`.integrity.DownloadedChunks`): a damaged chunk stops the run, named.
"""

from __future__ import annotations

import numpy as np
import torch
import litdata.helpers
from litdata import StreamingDataset
from litdata.streaming.sampler import ChunkedIndex

from .integrity import DownloadedChunks, ItemRules
from .storage import PreparedDataError

# litdata 0.2.44 asks pypi.org for a newer release (waiting up to 30 s) whenever a dataset or an optimize()
# starts; later releases ask only when LITDATA_CHECK_UPDATES is set. Its answer would only be a warning.
litdata.helpers._get_newer_version = lambda current_version: None


# -- reading ---------------------------------------------------------------------------------------------

def to_sample(item: dict, mask_seed: int, epoch: int | None) -> dict:
    """A stored item as the collator takes it: token ids and types, the NSP label (-100: none) and the
    seed of its masks, from (the run's seed, the item's uid) and, for dynamic masks, the epoch."""
    ids = np.asarray(item["input_ids"], dtype=np.int64)
    uid, b_start, label = (int(x) for x in item["info"])
    token_type_ids = np.zeros_like(ids)
    token_type_ids[b_start:] = 1
    seed = mask_seed * 1_000_003 + uid
    if epoch is not None:
        seed = seed * 1_000_033 + epoch
    return {"input_ids": ids, "token_type_ids": token_type_ids, "next_sentence_label": label if label >= 0 else -100,
            "mask_seed": seed % (1 << 63)}


def checked_item(dataset: StreamingDataset, index, rules: ItemRules | None,
                 downloads: DownloadedChunks | None = None) -> dict:
    """litdata's item at ``index``, every field checked by ``rules``, and its chunk, where it was downloaded
    from an object store, by ``downloads`` (a damaged chunk is named, not trained on)."""
    try:
        item = StreamingDataset.__getitem__(dataset, index)
    except (ValueError, IndexError, TypeError, KeyError, OverflowError) as err:  # damaged bytes, unpacked
        if downloads is not None:  # a download that is not the chunk says so first
            _check_download(dataset, index, downloads)
        raise PreparedDataError(f"{_chunk_name(dataset, index)}: cannot be read ({type(err).__name__}: {err}): the "
                                "chunk is damaged (delete the prepared dataset to prepare it again)") from None
    if downloads is not None:
        _check_download(dataset, index, downloads)
    problem = rules.problem(item) if rules is not None else None
    if problem:
        raise PreparedDataError(f"{_chunk_name(dataset, index)}: {problem}: the chunk is damaged (delete the "
                                "prepared dataset to prepare it again)")
    return item


def _check_download(dataset: StreamingDataset, index, downloads: DownloadedChunks) -> None:
    """The chunk of ``index`` as downloaded (litdata waited for the whole file before reading the item)."""
    chunk = _chunk_index(dataset, index)
    config = dataset.cache._reader.config
    downloads.check(config._chunks[chunk]["filename"], config[ChunkedIndex(index=-1, chunk_index=chunk)][0])


def _chunk_index(dataset: StreamingDataset, index) -> int:
    chunk = getattr(index, "chunk_index", None)
    return dataset.cache._get_chunk_index_from_index(int(index))[1] if chunk is None else chunk


def _chunk_name(dataset: StreamingDataset, index) -> str:
    try:
        name = dataset.cache._reader.config._chunks[_chunk_index(dataset, index)]["filename"]
        return f"{dataset.input_dir.url or dataset.input_dir.path}/{name}"
    except Exception:  # noqa: BLE001  litdata's internals differ between releases: name the dataset then
        return f"a chunk of {dataset.input_dir.url or dataset.input_dir.path}"


class StreamedInstances(StreamingDataset):
    """Training instances streamed from a prepared dataset's ``train/`` (local or remote): each epoch its
    chunks are shuffled and shared out among the ranks and their loader workers, and the items of each
    chunk shuffled. Each item becomes a sample whose dynamic masks follow (its uid, the epoch)."""

    def __init__(self, input_dir: str, mask_seed: int, static_masks: bool, shuffle_seed: int,
                 cache_dir: str | None = None, rules: ItemRules | None = None,
                 downloads: DownloadedChunks | None = None):
        super().__init__(input_dir, cache_dir=cache_dir, shuffle=True, drop_last=True, seed=shuffle_seed)
        self.mask_seed, self.static_masks, self.rules, self.downloads = mask_seed, static_masks, rules, downloads

    def __getitem__(self, index):
        item = checked_item(self, index, self.rules, self.downloads)
        return to_sample(item, self.mask_seed, None if self.static_masks else self.current_epoch)


class PreparedInstances(torch.utils.data.Dataset):
    """The instances of a prepared split read by index (validation: each rank takes its own indices, every
    example once). litdata's dataset is opened in each process that reads, so loader workers do not
    receive a copy of it."""

    def __init__(self, input_dir: str, mask_seed: int, length: int, cache_dir: str | None = None,
                 rules: ItemRules | None = None, downloads: DownloadedChunks | None = None):
        self.input_dir, self.mask_seed, self.length, self.cache_dir = input_dir, mask_seed, length, cache_dir
        self.rules, self.downloads = rules, downloads
        self._dataset = None

    def __getstate__(self):
        return {**self.__dict__, "_dataset": None}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        if self._dataset is None:
            self._dataset = StreamingDataset(self.input_dir, cache_dir=self.cache_dir)
        return to_sample(checked_item(self._dataset, int(index), self.rules, self.downloads), self.mask_seed, 0)

