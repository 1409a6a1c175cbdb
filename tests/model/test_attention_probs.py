"""Attention probabilities on request: the default path is untouched (bitwise), the probabilities are
those of transformers' eager attention, sum to 1 over real keys and are exactly 0 on padding."""

import time

import pytest
import torch
import torch.nn.functional as F
import transformers

from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.model import BertConfig, BertModel
from bert_exp.model.modeling import extended_attention_mask
from bert_exp.resources import minilm_dir
from bert_exp.tasks.checkpoints import load_checkpoint

TINY = BertConfig(vocab_size=64, num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64)


def tiny_batch():
    torch.manual_seed(0)
    ids = torch.randint(5, 64, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return ids, torch.zeros_like(ids), mask


def sdpa_reference(model: BertModel, ids, types, mask):
    """The encoder as it ran before attentions could be asked for: every layer through SDPA."""
    x = model.embeddings(ids, types)
    attn_mask = extended_attention_mask(mask)
    b, n, h = x.shape
    for layer in model.encoder.layer:
        sa = layer.attention.self
        q, k, v = (t.view(b, n, sa.num_heads, sa.head_dim).transpose(1, 2) for t in sa.project_qkv(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        attended = layer.attention.output(out.transpose(1, 2).reshape(b, n, h), x)
        x = layer.output(layer.intermediate(attended), attended)
    return x


def test_default_path_is_bitwise_the_fused_one_and_attentions_are_opt_in():
    torch.manual_seed(1)
    model = BertModel(TINY).eval()
    ids, types, mask = tiny_batch()
    with torch.no_grad():
        seq, pooled = model(ids, types, mask)
        assert torch.equal(seq, sdpa_reference(model, ids, types, mask))
        seq2, pooled2, attentions = model(ids, types, mask, output_attentions=True)
        _, _, hidden, attentions3 = model(ids, types, mask, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(seq2, seq, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pooled2, pooled, atol=1e-5, rtol=1e-5)
    assert len(attentions) == 2 and attentions[0].shape == (3, 4, 9, 9) and len(hidden) == 3
    assert all(torch.equal(a, b) for a, b in zip(attentions, attentions3))
    real = mask.bool()[:, None, None, :].expand_as(attentions[0])
    for probs in attentions:
        torch.testing.assert_close(probs.sum(-1), torch.ones(3, 4, 9))
        assert (probs[~real] == 0).all()  # exactly 0 on padding keys
        assert (probs[real] > 0).all()


def test_training_with_attentions_still_backpropagates():
    model = BertModel(TINY).train()
    ids, types, mask = tiny_batch()
    seq, _, attentions = model(ids, types, mask, output_attentions=True)
    (seq.sum() + attentions[0].sum()).backward()
    assert model.encoder.layer[0].attention.self.query.weight.grad is not None


def test_probabilities_equal_transformers_eager_attentions_on_minilm():
    ckpt = load_checkpoint(minilm_dir())
    ours = BertModel(ckpt.config).eval()
    ours.load_state_dict({k.removeprefix("bert."): v for k, v in ckpt.state_dict.items()})
    theirs = transformers.BertModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()
    tokenizer = load_vocab_file(minilm_dir() / "vocab.txt")
    tokenizer.enable_padding(pad_id=0)
    enc = tokenizer.encode_batch(["Who was Jim Henson?", "Jim Henson was a nice puppet, and a very good one."])
    ids = torch.tensor([e.ids for e in enc])
    mask = torch.tensor([e.attention_mask for e in enc])
    with torch.no_grad():
        attentions = ours(ids, None, mask, output_attentions=True)[-1]
        ref = theirs(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert len(attentions) == len(ref) == 6
    for a, b in zip(attentions, ref):
        torch.testing.assert_close(a[0], b[0], atol=1e-5, rtol=1e-4)
        real = mask[1].bool()
        torch.testing.assert_close(a[1][:, real][:, :, real], b[1][:, real][:, :, real], atol=1e-5, rtol=1e-4)


@pytest.mark.perf
def test_training_step_time_is_the_fused_path():
    """Nothing asks for attentions: a training step costs what the plain SDPA encoder costs."""
    config = BertConfig(vocab_size=1000, num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                        intermediate_size=1024, attention_probs_dropout_prob=0.0)
    model = BertModel(config, add_pooling_layer=False).train()  # the reference has no pooler either
    ids = torch.randint(5, 1000, (8, 128))
    types, mask = torch.zeros_like(ids), torch.ones_like(ids)

    def step(fn):
        model.zero_grad()
        start = time.perf_counter()
        fn().sum().backward()
        return time.perf_counter() - start

    ours_fn = lambda: model(ids, types, mask)[0]
    reference_fn = lambda: sdpa_reference(model, ids, types, mask)
    step(ours_fn), step(reference_fn)
    ours, reference = [], []
    for i in range(16):  # interleaved, alternating order, the fastest of each: noise hits both alike
        for which, fn in ((ours, ours_fn), (reference, reference_fn))[:: 1 if i % 2 else -1]:
            which.append(step(fn))
    assert min(ours) <= min(reference) * 1.15, (min(ours), min(reference))


def test_training_projects_query_key_and_value_in_one_product_with_the_same_values():
    torch.manual_seed(2)
    sa = BertModel(TINY).encoder.layer[0].attention.self
    x = torch.randn(2, 5, TINY.hidden_size)
    with torch.no_grad():
        separate = sa.project_qkv(x)  # three products
    fused = sa.project_qkv(x)  # one product over the weights side by side
    for a, b in zip(fused, separate):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    sum(t.square().sum() for t in fused).backward()
    for linear in (sa.query, sa.key, sa.value):  # each of the three Linears gets its own gradient
        assert linear.weight.grad is not None and linear.weight.grad.abs().sum() > 0
        assert linear.bias.grad is not None and linear.bias.grad.abs().sum() > 0
