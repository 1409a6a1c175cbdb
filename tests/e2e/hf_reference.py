"""What the side-by-side scripts (``hf_*_reference.py``) share: BERT's fine-tuning recipe for a transformers
model, as bert_exp's ``optim=finetune`` sets it (AdamW, fused, eps 1e-6, weight decay 0.01 except biases and
LayerNorm; 10 % linear warm-up, rounded as ours, then linear decay; clipping at 1.0), and a plain loop."""

from __future__ import annotations

import time

import torch

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias")


def optimizer_and_schedule(model, lr: float, total_steps: int, warmup_ratio: float = 0.1):
    import transformers

    groups = [{"params": [p for n, p in model.named_parameters() if not n.endswith(NO_DECAY)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if n.endswith(NO_DECAY)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, eps=1e-6, fused=True)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, round(warmup_ratio * total_steps), total_steps)
    return optimizer, scheduler


def fit(model, epoch_batches, epochs: int, steps_per_epoch: int, lr: float, precision: str) -> tuple[int, float]:
    """Trains ``model`` (its own loss) on ``epoch_batches()`` (one epoch's batches, in that epoch's order)
    ``epochs`` times; returns the real tokens trained on and the seconds it took."""
    optimizer, scheduler = optimizer_and_schedule(model, lr, epochs * steps_per_epoch)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    model.train()
    tokens, started = 0, time.perf_counter()
    for _ in range(epochs):
        for batch in epoch_batches():
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            tokens += int(batch["attention_mask"].sum())
    return tokens, time.perf_counter() - started
