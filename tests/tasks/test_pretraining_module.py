from functools import partial

import pytest
import torch
import transformers

from bert_exp.data import IGNORE_INDEX, PretrainingCollator, SpecialIds
from bert_exp.model import BertConfig
from bert_exp.tasks import PretrainingModule, linear_warmup_decay, parameter_groups
from bert_exp.tasks.pretraining import loss_by_position_range, position_range_names
from bert_exp.tasks import OptimSettings
from helpers import synthetic_samples

CONFIG = BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256)


def make_module(**kw):
    return PretrainingModule(CONFIG, optim=OptimSettings(partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.01)), **kw)


def test_loss_equals_transformers_dense_loss():
    module = make_module().eval()
    reference = transformers.BertForPreTraining(transformers.BertConfig(**CONFIG.to_dict())).eval()
    reference.load_state_dict(module.model.state_dict())
    batch = PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))(synthetic_samples(8, max_len=64))
    dense_labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    selected = batch["masked_lm_labels"] != IGNORE_INDEX
    rows = torch.arange(8)[:, None].expand_as(selected)
    dense_labels[rows[selected], batch["masked_lm_positions"][selected]] = batch["masked_lm_labels"][selected]
    with torch.no_grad():
        _, _, mlm_loss, nsp_loss = module._losses(batch)
        ref = reference(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                        attention_mask=batch["attention_mask"], labels=dense_labels,
                        next_sentence_label=batch["next_sentence_label"])
    torch.testing.assert_close(mlm_loss + nsp_loss, ref.loss, atol=1e-5, rtol=1e-5)


def test_weight_decay_excludes_biases_and_layernorm():
    module = make_module()
    decay, exempt = parameter_groups(module, 0.01)
    names = {id(p): n for n, p in module.named_parameters()}
    assert all(not names[id(p)].endswith("bias") and "LayerNorm" not in names[id(p)] for p in decay["params"])
    assert all(names[id(p)].endswith("bias") or "LayerNorm" in names[id(p)] for p in exempt["params"])
    assert (decay["weight_decay"], exempt["weight_decay"]) == (0.01, 0.0)
    total = sum(p.numel() for p in decay["params"] + exempt["params"])
    assert total == sum(p.numel() for p in module.parameters())  # the tied decoder counted once


@pytest.mark.parametrize("warmup_steps, warmup_ratio, warmup", [(10, None, 10), (None, 0.1, 10), (None, None, 0)])
def test_linear_warmup_then_linear_decay(warmup_steps, warmup_ratio, warmup):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = linear_warmup_decay(opt, total_steps=100, warmup_steps=warmup_steps, warmup_ratio=warmup_ratio)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    if warmup:
        assert lrs[0] == pytest.approx(1 / warmup) and lrs[warmup - 1] == pytest.approx(1.0)
        assert all(a < b for a, b in zip(lrs[:warmup - 1], lrs[1:warmup]))
    assert lrs[warmup] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(1 / (100 - warmup))
    assert all(a > b for a, b in zip(lrs[warmup:-1], lrs[warmup + 1:]))
    with pytest.raises(ValueError, match="not both"):
        linear_warmup_decay(opt, 100, warmup_steps=1, warmup_ratio=0.1)


def google_bert_lr(step, init_lr, total, warmup):
    """google-research/bert optimization.py, written out: polynomial_decay(init_lr, global_step, total,
    end_learning_rate=0, power=1) = init_lr * (1 - min(step, total) / total), and while
    global_step < warmup the warm-up rate init_lr * global_step / warmup instead."""
    if step < warmup:
        return init_lr * step / warmup
    return init_lr * (1 - min(step, total) / total)


def scheduled_lrs(sched, opt, steps):
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_google_decay_is_the_original_polynomial_decay():
    init_lr, total, warmup = 1e-4, 1000, 100
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=init_lr)
    google = scheduled_lrs(linear_warmup_decay(opt, total, warmup_steps=warmup, decay="google"), opt, total + 5)
    for step in (0, 1, 50, 99, 100, 101, 250, 500, 999, 1000, 1004):
        assert google[step] == pytest.approx(google_bert_lr(step, init_lr, total, warmup), abs=1e-15), step
    assert google[100] == pytest.approx(0.9 * init_lr) and google[0] == 0.0
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=init_lr)
    ours = scheduled_lrs(linear_warmup_decay(opt, total, warmup_steps=warmup), opt, total)
    # after warm-up ours (HuggingFace's) is T / (T - W) times the original's
    for step in (100, 300, 700, 999):
        assert ours[step] == pytest.approx(google[step] * total / (total - warmup))
    with pytest.raises(ValueError, match="decay='tf'"):
        linear_warmup_decay(opt, total, warmup_steps=warmup, decay="tf")


def test_the_decay_is_configured():
    from hydra.utils import instantiate

    from helpers import compose_config

    assert compose_config([]).optim.scheduler.decay == "huggingface"
    cfg = compose_config(["optim.scheduler.decay=google", "optim.scheduler.warmup_steps=10"])
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    lrs = scheduled_lrs(instantiate(cfg.optim.scheduler)(opt, total_steps=100), opt, 20)
    assert lrs[5] == pytest.approx(0.5) and lrs[10] == pytest.approx(0.9)


def test_initialise_from_the_checkpoint_of_another_run(tmp_path):
    from bert_exp.model.hf import CheckpointError
    from bert_exp.tasks.checkpoints import load_checkpoint
    source = make_module()
    (tmp_path / "checkpoints").mkdir()
    checkpoint = {"state_dict": source.state_dict()}
    source.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "checkpoints" / "last.ckpt")
    target = make_module()
    target.initialise_from(load_checkpoint(tmp_path))  # a run directory
    assert not target.fresh_parameters
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values()):
        assert torch.equal(a, b), name
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.ckpt")


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_fused_adamw_clips_the_gradient_norm_under_lightning(precision):
    """Lightning refuses fused optimizers with clipping under mixed precision; without a loss scaler
    our hook clips directly, and the norm the optimizer sees is at most the configured 1.0."""
    import lightning as L

    module = PretrainingModule(CONFIG, optim=OptimSettings(partial(torch.optim.AdamW, lr=1e-3, fused=True)))
    norms = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # grads as stepped on
            norms.append(torch.nn.utils.get_total_norm([p.grad for p in pl_module.parameters() if p.grad is not None]))

    batches = [PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))(synthetic_samples(4, max_len=32)) for _ in range(3)]
    trainer = L.Trainer(accelerator="cpu", precision=precision, max_steps=3, gradient_clip_val=1.0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[Record()])
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert len(norms) == 3 and all(n <= 1.0 + 1e-4 for n in norms), norms


def test_compile_callback_keeps_parameter_names():
    import lightning as L

    from bert_exp.runner.callbacks import CompileModel

    module = make_module()
    names = list(module.state_dict())
    batches = [PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))(synthetic_samples(4, max_len=32)) for _ in range(2)]
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[CompileModel(backend="eager")])  # inductor would take minutes here
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert module.model._compiled_call_impl is not None
    assert list(module.state_dict()) == names


def test_validation_splits_the_mlm_loss_by_position_range():
    # masked positions in every range, the boundaries included; each range's sum is over its own masks
    logits = torch.randn(2, 6, 10)
    labels = torch.tensor([[1, 2, 3, IGNORE_INDEX, 8, 9], [4, 5, 6, 7, 1, 2]])
    positions = torch.tensor([[3, 70, 200, 0, 255, 256], [63, 64, 127, 128, 300, 511]])
    token_losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.clamp(min=0).flatten(),
                                                     reduction="none").view(2, 6)
    sums, counts = loss_by_position_range(token_losses, positions, labels != IGNORE_INDEX)
    assert counts.tolist() == [2, 3, 3, 3]
    t = token_losses
    expected = [t[0, 0] + t[1, 0], t[0, 1] + t[1, 1] + t[1, 2], t[0, 2] + t[0, 4] + t[1, 3],
                t[0, 5] + t[1, 4] + t[1, 5]]
    torch.testing.assert_close(sums, torch.stack(expected))
    assert position_range_names() == ["0-63", "64-127", "128-255", "256-end"]


def validate(module, batches) -> dict:
    """Lightning's validation of ``module`` over ready-made batches: the metrics it logs."""
    import lightning as L

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    return trainer.validate(module, torch.utils.data.DataLoader(batches, batch_size=None), verbose=False)[0]


def test_the_position_ranges_are_logged_beside_the_overall_loss():
    torch.manual_seed(0)  # the initialisation, the bias and the masks: an unseeded draw may mask nothing past 63
    # a trained-looking model: the decoder's bias favours some tokens, so the token losses differ widely
    module = make_module(objective="mlm").eval()
    with torch.no_grad():
        module.model.cls.predictions.bias.copy_(torch.randn(30522) * 4)
    collate = PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))
    batches = [collate(synthetic_samples(8, seed=1, max_len=60)), collate(synthetic_samples(8, seed=2, max_len=128))]
    sums, counts = torch.zeros(4), torch.zeros(4)
    with torch.no_grad():  # what each range should hold, from the per-token losses of both batches
        for batch in batches:
            logits, _ = module(batch)
            labels, positions = batch["masked_lm_labels"], batch["masked_lm_positions"]
            losses = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none",
                                                       ignore_index=IGNORE_INDEX).view(labels.shape)
            selected = labels != IGNORE_INDEX
            for k, (lo, hi) in enumerate([(0, 64), (64, 128), (128, 256), (256, 10_000)]):
                inside = selected & (positions >= lo) & (positions < hi)
                sums[k] += losses[inside].sum()
                counts[k] += inside.sum()
    assert counts[0] > 0 and counts[1] > 0 and counts[2:].sum() == 0
    metrics = validate(module, batches)
    ranges = {k: v for k, v in metrics.items() if k.startswith("val/mlm_loss_by_position/")}
    assert set(ranges) == {"val/mlm_loss_by_position/0-63", "val/mlm_loss_by_position/64-127"}
    assert ranges["val/mlm_loss_by_position/0-63"] == pytest.approx((sums[0] / counts[0]).item(), rel=1e-4)
    assert ranges["val/mlm_loss_by_position/64-127"] == pytest.approx((sums[1] / counts[1]).item(), rel=1e-4)
    assert metrics["val/mlm_loss"] == pytest.approx((sums.sum() / counts.sum()).item(), rel=1e-4)
    assert abs(ranges["val/mlm_loss_by_position/0-63"] - ranges["val/mlm_loss_by_position/64-127"]) > 1e-3


def test_one_position_range_is_not_logged_twice():
    batch = PretrainingCollator(SpecialIds(0, 2, 3, 4, 30522))(synthetic_samples(8, max_len=60))
    metrics = validate(make_module(objective="mlm"), [batch])
    assert "val/mlm_loss" in metrics and not any("by_position" in k for k in metrics)
