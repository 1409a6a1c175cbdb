"""The losses of the pre-training objectives, on hand-made inputs."""

from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bert_exp.data import IGNORE_INDEX, CausalLMCollator, PretrainingCollator, SpecialIds
from bert_exp.model import BertConfig
from bert_exp.model.hf import Checkpoint, save_hf_directory
from bert_exp.tasks import ClassificationModule, PretrainingModule
from bert_exp.tasks.pretraining import causal_lm_loss, original_ids, replace_tokens, rtd_loss
from bert_exp.tasks import OptimSettings
from helpers import synthetic_samples

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=500)


def config(**kw) -> BertConfig:
    return BertConfig(**{**dict(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=128), **kw})


def module(objective, **kw):
    model_config = kw.pop("model_config", config(causal=objective == "clm"))
    return PretrainingModule(model_config, optim=OptimSettings(partial(torch.optim.AdamW, lr=1e-3)), objective=objective, **kw)


def samples(n=6, seed=0):
    out = synthetic_samples(n, seed=seed, max_len=40)
    for s in out:
        s["input_ids"] = np.where(s["input_ids"] > 4, s["input_ids"] % 495 + 5, s["input_ids"])
    return out


def test_causal_lm_loss_predicts_each_next_token():
    logits = torch.randn(2, 4, 7)
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, IGNORE_INDEX, IGNORE_INDEX]])
    expected = F.cross_entropy(torch.stack([logits[0, 0], logits[0, 1], logits[0, 2], logits[1, 0]]),
                               torch.tensor([2, 3, 4, 6]))
    torch.testing.assert_close(causal_lm_loss(logits, labels), expected)


def test_rtd_labels_mark_exactly_the_replaced_tokens():
    original = torch.tensor([[2, 10, 11, 12, 13, 3, 0], [2, 20, 21, 3, 0, 0, 0]])
    attention = (original != 0).long()
    positions = torch.tensor([[1, 3, 4], [2, 0, 0]])
    labels = torch.tensor([[10, 12, 13], [21, IGNORE_INDEX, IGNORE_INDEX]])
    masked = original.clone()
    masked[0, 1], masked[0, 3], masked[0, 4], masked[1, 2] = 4, 4, 99, 4  # [MASK], [MASK], random, [MASK]
    assert torch.equal(original_ids(masked, positions, labels), original)
    sampled = torch.tensor([[10, 40, 41], [50, 77, 77]])  # the first equals the original: not replaced
    corrupted, rtd = replace_tokens(masked, positions, labels, sampled, attention)
    assert torch.equal(corrupted, torch.tensor([[2, 10, 11, 40, 41, 3, 0], [2, 20, 50, 3, 0, 0, 0]]))
    assert torch.equal(rtd, torch.tensor([[0, 0, 0, 1, 1, 0, -100], [0, 0, 1, 0, -100, -100, -100]]))
    assert torch.equal(rtd.clamp(min=0).bool(), (corrupted != original) & attention.bool())
    logits = torch.zeros(2, 7)
    torch.testing.assert_close(rtd_loss(logits, rtd), torch.tensor(np.log(2.0), dtype=torch.float32))


def test_sop_objective_trains_the_sentence_head_under_its_own_name():
    m = module("mlm_sop")
    assert m.sentence_task == "sop" and m.nsp
    batch = PretrainingCollator(SPECIAL)(samples())
    _, _, mlm_loss, sop_loss = m._losses(batch)
    assert sop_loss > 0 and torch.isfinite(mlm_loss)


def test_mlm_objective_has_no_sentence_loss_even_with_pair_labels():
    m = module("mlm")
    assert m.sentence_task is None
    batch = PretrainingCollator(SPECIAL)(samples())  # segment pairs keep their labels; they are not trained
    _, _, _, nsp_loss = m._losses(batch)
    assert nsp_loss == 0
    assert module("mlm_nsp", nsp=False).objective == "mlm"  # the older spelling


def test_clm_objective_loss_and_its_model_checks():
    m = module("clm")
    batch = CausalLMCollator(SPECIAL)(samples())
    logits, loss = m._clm(batch)
    assert logits.shape[:2] == batch["input_ids"].shape and torch.isfinite(loss)
    assert loss.item() == pytest.approx(np.log(500), rel=0.2)
    with pytest.raises(ValueError, match="model.causal=true"):
        module("clm", model_config=config())
    with pytest.raises(ValueError, match="bidirectional"):
        module("mlm", model_config=config(causal=True))
    with pytest.raises(ValueError, match="older spelling"):
        module("mlm_sop", nsp=False)


def test_electra_generator_shares_embeddings_and_the_loss_is_mlm_plus_weighted_rtd(tmp_path):
    torch.manual_seed(0)
    m = module("electra", generator_size=0.25, rtd_weight=50.0)
    gen = m.model.generator
    assert gen.config.hidden_size == 16 and gen.config.num_attention_heads == 1 and gen.config.intermediate_size == 32
    assert gen.bert.embeddings is m.model.bert.embeddings
    assert gen.cls.predictions.decoder.weight is m.model.bert.embeddings.word_embeddings.weight
    batch = PretrainingCollator(SPECIAL)(samples())
    mlm_logits, rtd_logits, rtd_labels, mlm_loss, rtd = m._electra(batch)
    assert rtd_logits.shape == batch["input_ids"].shape
    # every replaced token is a masked position; padding is never scored
    replaced_rows, replaced_cols = (rtd_labels == 1).nonzero(as_tuple=True)
    for r, c in zip(replaced_rows.tolist(), replaced_cols.tolist()):
        assert c in batch["masked_lm_positions"][r].tolist()
    assert torch.all(rtd_labels[batch["attention_mask"] == 0] == IGNORE_INDEX)
    m.log = lambda *a, **k: None
    m.log_lr = lambda: None
    torch.manual_seed(1)
    loss = m.training_step(batch, 0)
    torch.manual_seed(1)
    _, _, _, mlm_again, rtd_again = m._electra(batch)
    torch.testing.assert_close(loss, mlm_again + 50.0 * rtd_again)
    loss.backward()
    assert m.model.bert.embeddings.word_embeddings.weight.grad is not None
    assert m.model.generator.bert.encoder.layer[0].attention.self.query.weight.grad is not None

    # the discriminator is a plain BERT encoder: fine-tuning starts from it; export writes it as ELECTRA's
    assert m.head is None
    ckpt = Checkpoint(m.config, m.model.state_dict(), head=m.head, source="electra")
    task = ClassificationModule(model_config=config(), optim=OptimSettings(torch.optim.AdamW), num_labels=2)
    task.initialise_from(ckpt)
    torch.testing.assert_close(task.model.bert.encoder.layer[1].output.dense.weight,
                               m.model.bert.encoder.layer[1].output.dense.weight)
    out = save_hf_directory(ckpt, tmp_path / "export")
    from safetensors.torch import load_file

    names = set(load_file(out / "model.safetensors"))
    assert "electra.embeddings.word_embeddings.weight" in names and "discriminator_predictions.dense.weight" in names
    assert not any(n.startswith(("generator", "bert.", "electra.pooler")) for n in names)
    assert "generator_lm_head.bias" in set(load_file(out / "generator" / "model.safetensors"))
