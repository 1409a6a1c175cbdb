"""What the DataModules share for reading: the loader settings, the error for a bad input file, the check
that inputs exist, an in-memory dataset of encoded examples and the padding collate.

Settings groups (this :class:`LoaderSettings`, :class:`~bert_exp.data.corpus.masking.MaskingSettings`,
:class:`~bert_exp.data.corpus.groups.InstanceSettings`, and the tasks' ``OptimSettings`` and ``Vocabulary``)
are dataclasses that hold their defaults; nowhere else repeats them. The config gives each its own
node (``data.loader``, ``data.masking``, ``data.instances``), generated from the dataclass
(bert_exp/runner/settings_store.py) with a ``_target_``, so Hydra builds the dataclass itself and the
DataModule receives it whole. The presets list only what they change, and ``--cfg job`` still prints
every value, the defaults included. Nested keys were chosen over flat ones because one key then means
the same thing for every DataModule (``data.loader.num_workers`` is what hardware presets set,
whatever the data) and the dataclass is the config node: flat keys would have needed either repeating
each field as an interpolation or re-packing keyword arguments in every constructor.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError


@dataclass(frozen=True)
class LoaderSettings:
    """How a DataModule batches and loads (``data.loader``); none of it changes the examples.

    ``batch_size`` is the per-device training batch: the runner sets it from ``global_batch_size``
    (and ``device_batch_size``), so the configured value applies only to a DataModule built by hand.
    ``eval_batch_size``: validation batches (pre-training validates with ``batch_size``).
    ``pad_to_max_length``: every batch padded to ``max_seq_length`` (static shapes, as XLA wants).
    ``pad_to_multiple_of``: a batch padded to its longest rounded up to this multiple, so a compiled model
    (torch.compile, a GPU's default) meets a few shapes, not one a length.
    ``group_by_length``: training batches of similar lengths (less padding); false keeps the paper's
    plain random batches (GLUE and tagging data; the corpus and SQuAD refuse it)."""

    batch_size: int = 32
    eval_batch_size: int = 128
    num_workers: int = 0
    pin_memory: bool = False
    pad_to_max_length: bool = False
    pad_to_multiple_of: int | None = None
    group_by_length: bool = False

    def padded(self, longest: int, max_seq_length: int) -> int:
        """The length a batch whose longest member has ``longest`` tokens is padded to."""
        if self.pad_to_max_length:
            return max_seq_length
        if self.pad_to_multiple_of:
            return min(-(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of, max(max_seq_length, longest))
        return longest

    def refuse_grouping(self, data: str) -> None:
        if self.group_by_length:
            raise ValueError(f"data.loader.group_by_length=true: {data} has no length grouping (leave it false)")


class DataFileError(UserError, ValueError):
    """A data file that cannot be read as configured; the message names the file (and line)."""


class DataMissingError(UserError, FileNotFoundError):
    """Input files that are not there; the message names each one."""


def input_present(spec: str) -> bool:
    """A path, or a glob that matches at least one file."""
    spec = os.path.expanduser(str(spec))
    return bool(glob.glob(spec)) if glob.has_magic(spec) else os.path.exists(spec)


def check_inputs(specs: list[str]) -> None:
    """Stops with one error naming every missing input. Fetching is the runner's job (bert_exp.datasets)."""
    missing = [str(s) for s in specs if not input_present(s)]
    if missing:
        raise DataMissingError("\n".join(f"missing input: {spec}" for spec in missing)
                               + "\n('python -m bert_exp.datasets list' shows the data sets that provide files)")


class EncodedDataset(torch.utils.data.Dataset):
    def __init__(self, features: list[dict]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return self.features[index]


def pad_batch(features: list[dict], pad_id: int, keys=("input_ids", "token_type_ids"),
              length: int | None = None, loader: LoaderSettings | None = None,
              max_seq_length: int | None = None) -> dict[str, torch.Tensor]:
    """Pads to the longest member, to ``length``, or as ``loader`` says (:meth:`LoaderSettings.padded`)."""
    longest = max(len(f["input_ids"]) for f in features)
    if length is None and loader is not None:
        length = loader.padded(longest, max_seq_length or longest)
    length = length or longest
    out = {}
    for key in keys:
        array = np.full((len(features), length), pad_id if key == "input_ids" else 0, dtype=np.int64)
        for row, f in enumerate(features):
            array[row, : len(f[key])] = f[key]
        out[key] = torch.from_numpy(array)
    mask = np.zeros((len(features), length), dtype=np.int64)
    for row, f in enumerate(features):
        mask[row, : len(f["input_ids"])] = 1
    out["attention_mask"] = torch.from_numpy(mask)
    return out


def read_utf8(path: Path) -> str:
    """The text of a UTF-8 file, a leading byte-order mark dropped (SentEval's MRPC files begin with one, as
    files saved by Windows tools do); one DataFileError naming the file, the line and what the bytes look like
    otherwise (UTF-16 with its byte-order mark, latin-1 or binary)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            guess = "it looks like UTF-16 (save it as UTF-8)"
        elif b"\x00" in data[:4096]:
            guess = "it looks binary, or UTF-16 without a byte-order mark"
        else:
            guess = "perhaps latin-1 / cp1252 (save it as UTF-8: iconv -f latin1 -t utf-8)"
        raise DataFileError(f"{path}:{line}: not UTF-8 (byte {data[err.start]:#04x}); {guess}") from None
