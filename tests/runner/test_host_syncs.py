"""No host synchronisation per training step: on a GPU each ``.item()``, ``.tolist()``, ``.cpu()``,
``float(t)``, ``int(t)`` or ``bool(t)`` waits for the device to finish the queued work, so a loop that
reads one value per step cannot run ahead of the GPU. Counted here on CPU, with the runner's own
callbacks, during training steps: reads may happen only at logging steps (every ``log_every_n_steps``)."""

import traceback
from collections import defaultdict
from functools import partial

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from bert_exp.data import PretrainingCollator, SpecialIds
from bert_exp.model import BertConfig
from bert_exp.runner.budget import Budget, BudgetClock, parse_budget
from bert_exp.runner.callbacks import DivergenceCheck, ProgressBar, TokenThroughput
from bert_exp.tasks import ClassificationModule, OptimSettings, PretrainingModule

from helpers import synthetic_samples

CONFIG = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64)
EVERY = 4  # log_every_n_steps
STEPS = 4 * EVERY
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


class CountReads(L.Callback):
    """Counts tensor reads per training batch, from the batch's start to the next batch's start (the
    step, the optimizer, every callback's batch-end hook), with where each came from."""

    def __init__(self):
        self.batch = None
        self.reads = defaultdict(list)  # batch index -> [(name, where)]
        self._originals = {}

    def install(self, monkeypatch):
        for name in READS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _name=name, _original=original, **kwargs):
                if self.batch is not None:
                    where = [f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno} {f.name}"
                             for f in traceback.extract_stack(limit=14)[:-1]]
                    self.reads[self.batch].append((_name, where))
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batch = batch_idx

    def on_train_end(self, trainer, pl_module):
        self.batch = None


def pretraining_batches():
    collate = PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))
    return [collate(synthetic_samples(4, seed=i, max_len=32)) for i in range(STEPS)]


def classification_batches():
    batches = []
    for i in range(STEPS):
        batch = PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))(synthetic_samples(4, seed=i, max_len=32))
        batches.append({key: batch[key] for key in ("input_ids", "token_type_ids", "attention_mask")}
                       | {"labels": torch.tensor([0, 1, 1, 0])})
    return batches


@pytest.mark.parametrize("task", ["pretraining", "classification"])
def test_training_steps_read_nothing_from_the_device_between_logging_steps(task, tmp_path, monkeypatch):
    torch.manual_seed(0)
    optimizer = OptimSettings(partial(torch.optim.AdamW, lr=1e-3, fused=True))
    if task == "pretraining":
        module, batches = PretrainingModule(CONFIG, optim=optimizer), pretraining_batches()
    else:
        module, batches = ClassificationModule(CONFIG, optim=optimizer), classification_batches()
    counter = CountReads()
    budget = Budget(BudgetClock(parse_budget("1B")))
    trainer = L.Trainer(
        accelerator="cpu", max_steps=STEPS, log_every_n_steps=EVERY, gradient_clip_val=1.0,
        logger=CSVLogger(tmp_path), enable_checkpointing=False, enable_model_summary=False,
        callbacks=[budget, TokenThroughput(EVERY), DivergenceCheck(3), ProgressBar(refresh_rate=EVERY), counter],
    )
    counter.install(monkeypatch)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert trainer.global_step == STEPS
    # Lightning logs where (batches that stepped + 1) % EVERY == 0; the progress bar refreshes every EVERY
    allowed = {0} | {b for b in range(STEPS) if (b + 1) % EVERY == 0}  # 0: the budget's first reading
    offending = {b: reads for b, reads in counter.reads.items() if b not in allowed}
    report = "\n".join(f"batch {b}: {name} at {' <- '.join(reversed(where[-8:]))}"
                       for b, reads in sorted(offending.items()) for name, where in reads[:3])
    assert not offending, f"device reads outside logging steps:\n{report}"
    # and the values still arrive: tokens counted, throughput logged, budget spent
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    assert budget.clock.spent == pytest.approx(tokens)
    assert "train/tokens_per_sec" in trainer.logged_metrics


def fit_with(callbacks, batches, steps=STEPS):
    module = PretrainingModule(CONFIG, optim=OptimSettings(partial(torch.optim.AdamW, lr=1e-3)))
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, log_every_n_steps=EVERY, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False,
                        callbacks=callbacks)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return trainer


def test_a_token_budget_read_lazily_still_stops_at_the_step_that_spends_it():
    batches = pretraining_batches()
    counts = [int(b["attention_mask"].sum()) for b in batches]
    for amount in (sum(counts[:3]) - 1, sum(counts[:9]) + 1, sum(counts[:13])):
        exact = next(i + 1 for i in range(STEPS) if sum(counts[:i + 1]) >= amount)
        budget = Budget(BudgetClock(parse_budget(str(amount))))
        trainer = fit_with([budget], batches)
        assert trainer.global_step == exact and budget.clock.spent == sum(counts[:exact])


class NanFrom(L.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.bert.embeddings.word_embeddings.weight.fill_(float("nan"))


def test_divergence_read_lazily_names_the_step_the_streak_reached_patience():
    from bert_exp.runner.callbacks import Diverged

    with pytest.raises(Diverged) as err:
        fit_with([NanFrom(5), DivergenceCheck(3)], pretraining_batches())
    # NaN from the 6th step (global step 5 -> 6): three in a row at step 8; read at step 8 (EVERY = 4)
    assert (err.value.step, err.value.first_step) == (8, 6)
    assert "the training loss" in err.value.reason
