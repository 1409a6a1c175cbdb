"""Our Lightning ``.ckpt`` files, read next to the code that writes them (BertTask.on_save_checkpoint):
the model config, the head the task recorded, the vocabulary and the weights, as one
:class:`~bert_exp.model.hf.Checkpoint`. :func:`load_checkpoint` also takes a HuggingFace directory."""

from __future__ import annotations

from pathlib import Path

import torch

from ..model.config import BertConfig
from ..model.hf import Checkpoint, CheckpointError, load_hf_directory, read_hf_config
from ..model.hub import local_source

# what checkpoints written before the head was recorded said instead (task class names then)
LEGACY_TASK_HEADS = {"PretrainingModule": "pretraining", "ClassificationModule": "classification",
                     "QuestionAnsweringModule": "question_answering",
                     "TokenClassificationModule": "token_classification"}


def checkpoint_metadata(task) -> dict:
    """What a .ckpt carries besides Lightning's state: enough to rebuild and export the model alone."""
    meta = {"bert_config": task.config.to_dict(), "head": task.head,
            "num_labels": getattr(task.model, "num_labels", None), "lowercase": task.lowercase}
    if task.vocab is not None:
        meta["vocab"] = task.vocab
    if task.vocabulary.tokenizer is not None:  # a byte-level BPE: the tokenizer.json its tokens cannot rebuild
        meta["tokenizer"] = task.vocabulary.tokenizer
    if getattr(task, "labels", None) is not None:  # token classification: the label names
        meta["labels"] = list(task.labels)
    if getattr(task.model, "layers", "last") != "last":  # the head's features (which layers), to rebuild it
        meta["layers"] = task.model.layers
    if getattr(task.model, "pooling", "cls") != "cls":  # a classifier on the mean of the tokens
        meta["pooling"] = task.model.pooling
    if getattr(task.model, "head_type", "linear") != "linear":  # a tagger's BiLSTM
        meta["head_type"] = task.model.head_type
        meta["lstm_size"] = task.model.lstm.hidden_size
    return meta


def read_lightning_checkpoint(path: Path) -> dict:
    """The raw dict, or one error naming the file (truncated, random or empty files included)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as first:  # noqa: BLE001  older Lightning state we wrote ourselves: trusted
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # noqa: BLE001
            raise CheckpointError(f"{path}: not a readable checkpoint ({type(first).__name__}: "
                                  f"{str(first).splitlines()[0] if str(first) else 'unreadable'}); "
                                  "it may be truncated or not a .ckpt file") from None


def load_lightning(path: Path) -> Checkpoint:
    ckpt = read_lightning_checkpoint(path)
    if not isinstance(ckpt, dict) or "bert_config" not in ckpt:
        raise CheckpointError(f"{path} is not a bert_exp checkpoint (no bert_config)")
    state = {k[len("model."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    head = ckpt["head"] if "head" in ckpt else LEGACY_TASK_HEADS.get(ckpt.get("task"))
    return Checkpoint(BertConfig.from_dict(ckpt["bert_config"]), state, ckpt.get("vocab"), ckpt.get("lowercase", True),
                      head, ckpt.get("num_labels"), str(path),
                      {"global_step": ckpt.get("global_step"), "layers": ckpt.get("layers", "last"), "pooling": ckpt.get("pooling", "cls"),
                       "head_type": ckpt.get("head_type", "linear"), "lstm_size": ckpt.get("lstm_size")},
                      ckpt.get("labels"), ckpt.get("tokenizer"))


def lightning_checkpoint_path(path: str | Path) -> Path:
    """A ``.ckpt`` file of ours, or a run directory's ``checkpoints/last.ckpt`` (its best checkpoint when a
    finished run kept only that: callbacks.last_checkpoint.keep_after_finish=false)."""
    path = Path(path).expanduser()
    if path.is_dir():
        last = path / "checkpoints" / "last.ckpt"
        if last.is_file():
            return last
        best = sorted((path / "checkpoints").glob("best-*.ckpt")) if (path / "checkpoints").is_dir() else []
        if best:
            return best[-1]
        raise CheckpointError(f"{path} is neither a HuggingFace directory (config.json) nor a run "
                              f"directory (checkpoints/last.ckpt)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return path


def load_checkpoint(path: str | Path) -> Checkpoint:
    """A HuggingFace BERT, ALBERT or ELECTRA directory (or a Hub model: ``hf:NAME[@REVISION]``), an exported
    directory, a run directory or a ``.ckpt``. A Hub model's repository, revision and commit are in
    ``extra["hub"]``."""
    path, hub = local_source(path)
    if path.is_dir() and (path / "config.json").is_file():
        ckpt = load_hf_directory(path)
        if hub is not None:
            ckpt.extra["hub"] = hub.record
        return ckpt
    return load_lightning(lightning_checkpoint_path(path))


def checkpoint_config(path: str | Path) -> BertConfig:
    """The model config alone: config.json of a HuggingFace directory, or a .ckpt opened memory-mapped,
    so the weights are not read (fine-tuning reads them once, for task.init_from)."""
    path, _ = local_source(path)
    if path.is_dir() and (path / "config.json").is_file():
        return read_hf_config(path)[0]
    path = lightning_checkpoint_path(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001  anything unusual: the full reader, with its one-line errors
        return load_lightning(path).config
    if not isinstance(ckpt, dict) or "bert_config" not in ckpt:
        raise CheckpointError(f"{path} is not a bert_exp checkpoint (no bert_config)")
    return BertConfig.from_dict(ckpt["bert_config"])


def model_config_of(source: str | Path, vocab_size: int | None = None, pad_token_id: int | None = None,
                    **overrides) -> BertConfig:
    """The model config of a checkpoint (``model=from_checkpoint``): fine-tuning takes the shape of the
    weights it starts from, and a run from scratch can take the shape of another model. ``overrides``
    change what does not alter the shape (dropout rates, say); the vocabulary must be the checkpoint's."""
    import dataclasses

    if not source:
        raise CheckpointError("model=from_checkpoint needs model.source (or task.init_from): a run directory, "
                              ".ckpt or HuggingFace directory whose shape to take")
    config = checkpoint_config(source)
    # fewer tokens than rows: a vocabulary padded for speed (ModernBERT-base: 50,280 tokens, 50,368 rows)
    if vocab_size is not None and vocab_size > config.vocab_size:
        raise CheckpointError(f"model.source={source} has a vocabulary of {config.vocab_size}, the data "
                              f"{vocab_size}: give data.vocab_file the source's vocab.txt")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(config)})
    if unknown:
        raise CheckpointError(f"model.{unknown[0]}: not a BertConfig field")
    if pad_token_id is not None:
        overrides["pad_token_id"] = pad_token_id
    return dataclasses.replace(config, **overrides)
