"""``model.gradient_checkpointing``: each layer computed again in backward gives the same gradients, with
dropout on (its masks are drawn again from the same random state), padded and unpadded, and keeps less."""

import dataclasses

import pytest
import torch

from bert_exp.model import BertConfig, BertForPreTraining, BertForSequenceClassification

TINY = BertConfig(vocab_size=96, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=32)


def batch(lengths=(12, 5, 9), width=12):
    torch.manual_seed(1)
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    return torch.randint(1, 96, (len(lengths), width)) * mask, torch.zeros_like(mask), mask  # ids, types, mask


def gradients(config: BertConfig, inputs: dict) -> tuple[torch.Tensor, dict]:
    torch.manual_seed(0)
    model = BertForSequenceClassification(config, num_labels=3).train()  # dropout on
    torch.manual_seed(2)  # the dropout masks' random state
    loss = model(*inputs).square().sum()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("unpad", [False, True])
def test_recomputed_layers_give_the_same_loss_and_gradients(unpad):
    config = dataclasses.replace(TINY, unpad=unpad, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2)
    loss, expected = gradients(config, batch())
    checkpointed_loss, got = gradients(dataclasses.replace(config, gradient_checkpointing=True), batch())
    torch.testing.assert_close(checkpointed_loss, loss, rtol=0, atol=0)
    assert got.keys() == expected.keys() and len(got) > 10
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-6, atol=1e-7, msg=name)


def saved_bytes(config: BertConfig) -> int:
    """What autograd keeps for backward over one forward pass."""
    model = BertForPreTraining(config).train()
    kept = []

    def pack(t):
        kept.append(t.numel() * t.element_size())
        return t

    inputs = batch(lengths=(32,) * 8, width=32)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)[0].sum()
    return sum(kept)


def test_checkpointing_keeps_less_for_backward():
    config = dataclasses.replace(TINY, num_hidden_layers=4)
    assert saved_bytes(dataclasses.replace(config, gradient_checkpointing=True)) < 0.6 * saved_bytes(config)


def test_evaluation_and_no_grad_compute_once():
    model = BertForSequenceClassification(dataclasses.replace(TINY, gradient_checkpointing=True), num_labels=3)
    calls = []
    model.bert.encoder.layer[0].register_forward_pre_hook(lambda *args: calls.append(1))
    model.train()
    model(*batch()).sum().backward()
    assert len(calls) == 2  # once forward, once again in backward
    calls.clear()
    with torch.no_grad():
        model(*batch())
    model.eval()
    model(*batch()).sum().backward()
    assert len(calls) == 2  # once each: no recomputation
