"""One training step of our model and of transformers' on the same inputs, for the benchmark.

Both sides get the same configuration, the same weights (ours are copied into transformers' model), the
same batch and the same optimizer (torch AdamW); the loss is each library's own: ours scores the masked
positions only (the sparse MLM head), transformers' ``BertForPreTraining`` scores every position.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from ...data import IGNORE_INDEX
from ...model import (
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
)
from ...tasks.classification import classification_loss
from ...tasks.pretraining import mlm_nsp_losses
from ...tasks.question_answering import span_loss

TASKS = ("pretraining", "classification", "qa")


Batch = dict[str, torch.Tensor]  # our collators' keys: input_ids, token_type_ids, attention_mask, the labels


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device) for k, v in batch.items()}


def real_tokens(batch: Batch) -> int:
    return int(batch["attention_mask"].sum())


def random_batch(config: BertConfig, batch: int, seq: int, predictions: int, seed: int = 0) -> Batch:
    """Full-length sequences (no padding), two segments, ``predictions`` masked positions each."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, config.vocab_size, (batch, seq), generator=g)
    token_type_ids = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    positions = torch.stack([torch.randperm(seq - 1, generator=g)[:predictions] + 1 for _ in range(batch)]).sort(1).values
    return {
        "input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": torch.ones_like(input_ids),
        "masked_lm_positions": positions, "masked_lm_labels": input_ids.gather(1, positions),
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=g),
        "labels": torch.randint(0, 2, (batch,), generator=g),
        "start_positions": torch.randint(0, seq, (batch,), generator=g),
        "end_positions": torch.randint(0, seq, (batch,), generator=g),
    }


def reference_inputs(task: str, b: Batch) -> Batch:
    """Our batch as transformers' models take it: pre-training's labels dense over the sequence (-100
    where nothing is predicted), each task's own label keys."""
    inputs = {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    if task == "pretraining":
        labels = b["masked_lm_labels"]
        # unused prediction slots carry IGNORE_INDEX; sent to column 0 ([CLS], never predicted)
        positions = b["masked_lm_positions"].masked_fill(labels == IGNORE_INDEX, 0)
        dense = torch.full_like(b["input_ids"], IGNORE_INDEX).scatter(1, positions, labels)
        dense[:, 0] = IGNORE_INDEX
        return {**inputs, "labels": dense, "next_sentence_label": b["next_sentence_label"]}
    if task == "classification":
        return {**inputs, "labels": b["labels"]}
    return {**inputs, "start_positions": b["start_positions"], "end_positions": b["end_positions"]}


def build_ours(task: str, config: BertConfig, num_labels: int = 2) -> torch.nn.Module:
    return {"pretraining": lambda: BertForPreTraining(config),
            "classification": lambda: BertForSequenceClassification(config, num_labels=num_labels),
            "qa": lambda: BertForQuestionAnswering(config)}[task]()


def build_reference(task: str, config: BertConfig, ours: torch.nn.Module, num_labels: int = 2) -> torch.nn.Module:
    """transformers' model of the same task and size, holding a copy of our weights."""
    import transformers

    hf_config = transformers.BertConfig(**config.to_dict(), num_labels=num_labels)
    cls = {"pretraining": transformers.BertForPreTraining,
           "classification": transformers.BertForSequenceClassification,
           "qa": transformers.BertForQuestionAnswering}[task]
    model = cls(hf_config)
    missing, unexpected = model.load_state_dict(ours.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith(("decoder.weight", "decoder.bias", "position_ids"))]
    if missing or unexpected:
        raise RuntimeError(f"weights do not line up: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model


def loss_ours(task: str, model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """The losses our task modules train with, on our batch."""
    inputs = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    if task == "pretraining":
        mlm, nsp = model(*inputs, b["masked_lm_positions"])
        return sum(mlm_nsp_losses(mlm, nsp, b["masked_lm_labels"], b["next_sentence_label"]))
    if task == "classification":
        return classification_loss(model(*inputs), b["labels"], num_labels=model.num_labels)
    start, end = model(*inputs)
    return span_loss(start, end, b["start_positions"], b["end_positions"])


def loss_reference(task: str, model: torch.nn.Module, b: Batch) -> torch.Tensor:
    """transformers' own loss, on the batch as :func:`reference_inputs` made it."""
    return model(**b).loss


def autocast(device: torch.device, precision: str):
    if precision == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if precision == "16-mixed":
        return torch.autocast(device.type, dtype=torch.float16)
    return contextlib.nullcontext()


def make_step(task: str, model: torch.nn.Module, loss_fn: Callable, batches: Batch | list[Batch], precision: str,
              device: torch.device, fused: bool = False) -> Callable[[], torch.Tensor]:
    """A closure running one optimizer step (forward, backward, AdamW update) on each of ``batches`` in turn
    (or on the one batch given; on the first ``limit`` of them where given) and returning the last loss."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=fused or None)
    scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None

    batches = batches if isinstance(batches, list) else [batches]

    def step(limit: int | None = None) -> torch.Tensor:
        for batch in batches[:limit]:
            with autocast(device, precision):
                loss = loss_fn(task, model, batch)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    step.model = model
    return step
