"""The encoder's options after BERT (docs/model-options.md): each one's shapes, gradients and
padding (a padded sequence's real positions equal the sequence alone), its own arithmetic where it has
one, and the combinations refused. Each paper's combination learns: tests/e2e/test_architecture_learning_cli.py."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from bert_exp.model import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel
from bert_exp.model.modeling import LayerAttention, alibi_slopes, layer_attention, rotate, rotary_tables, sinusoids

VOCAB = 100


def tiny(**kw) -> BertConfig:
    values = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **kw})


# each option away from BERT, alone (and the settings it needs beside it)
OPTIONS = {
    "geglu": dict(feed_forward="glu"),
    "swiglu": dict(feed_forward="glu", hidden_act="silu"),
    "no_dense_bias": dict(dense_bias=False),
    "no_norm_bias": dict(norm_bias=False),
    "no_decoder_bias": dict(decoder_bias=False),
    "no_mlm_head_transform": dict(mlm_head_transform=False),
    "sinusoidal": dict(position_embedding_type="sinusoidal"),
    "rotary": dict(position_embedding_type="rotary"),
    "rotary_two_bases": dict(position_embedding_type="rotary", local_attention=4, rotary_local_base=100.0,
                             global_attention_every=3),
    "alibi": dict(position_embedding_type="alibi"),
    "alibi_local": dict(position_embedding_type="alibi", local_attention=4, global_attention_every=2),
    "local_global": dict(local_attention=4, global_attention_every=3),
    "all_local": dict(local_attention=4, global_attention_every=99),
    "no_token_types": dict(token_type_embeddings=False),
    "no_embedding_norm": dict(embedding_norm=False, layer_norm_position="pre"),
    "no_first_attention_norm": dict(first_attention_norm=False, layer_norm_position="pre"),
    "pre_ln_without_final_norm": dict(layer_norm_position="pre", final_norm=False),
    "padded_vocab": dict(pad_vocab_multiple=64),
    "transform_head": dict(classifier_head="transform"),
}


def batch(seed: int = 0, lengths=(12, 7, 3)):
    torch.manual_seed(seed)
    ids = torch.randint(5, VOCAB, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, torch.zeros_like(ids), mask


@pytest.mark.parametrize("name", OPTIONS)
def test_each_option_has_the_shapes_and_every_parameter_a_gradient(name):
    config = tiny(**OPTIONS[name])
    assert config.non_bert_options()  # not BERT: a HuggingFace BERT export refuses it (test below)
    model = BertForPreTraining(config)
    ids, types, mask = batch()
    positions = torch.tensor([[1, 2], [3, 4], [0, 1]])
    mlm, nsp = model(ids, types, mask, positions)
    assert mlm.shape == (3, 2, VOCAB)  # a padded vocabulary's extra rows are never a prediction
    assert (nsp is None) == (config.classifier_head == "transform")
    (mlm.sum() + (nsp.sum() if nsp is not None else 0)).backward()
    unreached = ("cls.seq_relationship.",) if nsp is None else ()
    missing = [n for n, p in model.named_parameters() if not n.startswith(unreached)
               and (p.grad is None or not p.grad.abs().sum())]
    assert not missing, missing


@pytest.mark.parametrize("name", OPTIONS)
def test_padding_changes_nothing_at_the_real_positions(name):
    torch.manual_seed(1)
    model = BertModel(tiny(**OPTIONS[name])).eval()
    ids, types, mask = batch()
    with torch.no_grad():
        padded, _ = model(ids, types, mask)
        for row, length in enumerate(mask.sum(1).tolist()):
            alone, _ = model(ids[row:row + 1, :length], types[row:row + 1, :length])
            torch.testing.assert_close(padded[row, :length], alone[0], atol=1e-5, rtol=1e-5)


def test_options_build_only_what_they_use():
    def names(**kw) -> set[str]:
        return set(BertForPreTraining(tiny(**kw)).state_dict())

    bert = names()
    assert not any(".bias" in n and "LayerNorm" not in n and not n.startswith(("cls.seq", "cls.predictions.bias",
                                                                              "cls.predictions.decoder"))
                   for n in names(dense_bias=False))
    assert not any("LayerNorm.bias" in n for n in names(norm_bias=False))
    assert bert - names(decoder_bias=False) == {"cls.predictions.bias", "cls.predictions.decoder.bias"}
    assert not any("transform" in n for n in names(mlm_head_transform=False))
    assert bert - names(position_embedding_type="rotary") == {"bert.embeddings.position_embeddings.weight"}
    assert names(position_embedding_type="sinusoidal") - bert == {"bert.embeddings.position_scale"}
    assert bert - names(token_type_embeddings=False) == {"bert.embeddings.token_type_embeddings.weight"}
    pre = names(layer_norm_position="pre")
    assert pre - names(layer_norm_position="pre", first_attention_norm=False) == {
        "bert.encoder.layer.0.attention.output.LayerNorm.weight", "bert.encoder.layer.0.attention.output.LayerNorm.bias"}
    assert pre - names(layer_norm_position="pre", final_norm=False) == {"bert.encoder.LayerNorm.weight",
                                                                       "bert.encoder.LayerNorm.bias"}
    glu = BertForPreTraining(tiny(feed_forward="glu"))
    assert glu.bert.encoder.layer[0].intermediate.dense.weight.shape == (96, 32)  # twice intermediate_size
    padded = BertForPreTraining(tiny(pad_vocab_multiple=64))
    assert padded.bert.embeddings.word_embeddings.weight.shape[0] == 128 and padded.config.padded_vocab_size == 128
    head = BertForSequenceClassification(tiny(classifier_head="transform"), num_labels=3)
    assert head.bert.pooler is None and {"head.dense.weight", "head.LayerNorm.weight"} <= set(head.state_dict())


def test_glu_is_the_activated_half_times_the_other():
    layer = BertModel(tiny(feed_forward="glu", hidden_act="silu")).encoder.layer[0].intermediate
    x = torch.randn(2, 5, 32)
    value, gate = F.linear(x, layer.dense.weight, layer.dense.bias).split(48, dim=-1)
    torch.testing.assert_close(layer(x), F.silu(value) * gate)


def test_sinusoids_are_vaswani_s_table():
    table = sinusoids(50, 16)
    p, i = 7, 3
    assert table[p, 2 * i].item() == pytest.approx(math.sin(p / 10000 ** (2 * i / 16)), abs=1e-6)
    assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(p / 10000 ** (2 * i / 16)), abs=1e-6)


def test_rotary_scores_depend_only_on_the_distance():
    torch.manual_seed(0)
    q, k = torch.randn(8), torch.randn(8)
    cos, sin = rotary_tables(20, 8, 10000.0, "cpu")

    def score(i: int, j: int) -> float:
        return (rotate(q, (cos[i], sin[i])) @ rotate(k, (cos[j], sin[j]))).item()

    assert score(3, 5) == pytest.approx(score(10, 12), abs=1e-5) and score(3, 5) != pytest.approx(score(3, 9), abs=1e-3)


def test_alibi_slopes_and_bias():
    assert alibi_slopes(8).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)])
    # 12 heads: the 8 of a power of two, then every other one of 16's (Press et al.'s reference code)
    assert alibi_slopes(12).tolist() == pytest.approx([2 ** -(i + 1) for i in range(8)] + [2 ** -(0.5 + i) for i in range(4)])
    attention = layer_attention(tiny(position_embedding_type="alibi"), torch.tensor([[1, 1, 1, 0]]), 4, "cpu")
    bias = attention[True].mask[0]  # [heads, query, key]
    assert bias[0, 0, 2].item() == pytest.approx(-2 * 2 ** -2)  # 4 heads: slopes 1/4, 1/16, ...
    assert bias[1, 2, 0].item() == pytest.approx(-2 * 2 ** -4) and bias[0, 1, 3].item() == float("-inf")


def test_local_layers_see_only_their_window_and_layer_zero_is_global():
    config = tiny(local_attention=4, global_attention_every=3)
    assert [config.layer_is_global(i) for i in range(3)] == [True, False, False]
    attention = layer_attention(config, torch.ones(1, 8, dtype=torch.long), 8, "cpu")
    local, full = attention[False].mask[0, 0], attention[True].mask[0, 0]
    assert full.all() and local[3].tolist() == [False, True, True, True, True, True, False, False]


@pytest.mark.parametrize("settings, message", [
    (dict(global_attention_every=3), "model.global_attention_every=3 .* model.local_attention=null"),
    (dict(rotary_local_base=10.0, local_attention=4), "model.rotary_local_base=10.0 .*model.position_embedding_type=absolute"),
    (dict(final_norm=True), "model.final_norm=true after model.layer_norm_position=post"),
    (dict(first_attention_norm=False), "model.first_attention_norm=false with model.layer_norm_position=post"),
    (dict(first_attention_norm=False, layer_norm_position="pre", embedding_norm=False),
     "model.first_attention_norm=false .* model.embedding_norm=false"),
    (dict(mlm_head_transform=False, embedding_size=16), "model.mlm_head_transform=false with model.embedding_size=16"),
    (dict(feed_forward="swiglu"), r"model.feed_forward='swiglu': expected one of 'mlp', 'glu'"),
    (dict(position_embedding_type="rotary", num_attention_heads=32), "odd"),
    (dict(local_attention=0), "model.local_attention=0: must be positive"),
])
def test_combinations_that_make_no_sense_are_one_line_naming_both(settings, message):
    with pytest.raises(ValueError, match=message) as error:
        tiny(**settings)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", [n for n in OPTIONS if n not in ("rotary", "rotary_two_bases", "no_token_types",
                                                                   "transform_head")])
def test_export_as_bert_is_refused_naming_the_options(name, tmp_path):
    from bert_exp.model.hf import Checkpoint, CheckpointError, save_hf_directory

    config = tiny(**OPTIONS[name])
    ckpt = Checkpoint(config, BertForPreTraining(config).state_dict(), None, True, "pretraining", None, "run")
    named = ", ".join(f"model.{k}={v}" for k, v in config.non_bert_options().items())
    with pytest.raises(CheckpointError, match=rf"^run: a model with {named} has no HuggingFace BERT equivalent"):
        save_hf_directory(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_bert_is_unchanged_by_the_options_defaults():
    config = tiny()
    assert config.non_bert_options() == {} and config.padded_vocab_size == VOCAB and not config.has_final_norm
    assert all(config.layer_is_global(i) for i in range(3))
    assert isinstance(layer_attention(config, None, 4, "cpu")[True], LayerAttention)


def test_the_options_page_lists_every_architecture_field_of_ours():
    """docs/model-options.md's table, checked against the declarations (the one place of each field)."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "model-options.md").read_text(encoding="utf-8")
    rows = "\n".join(line.split("|")[1] for line in page.splitlines() if line.startswith("| `"))
    fields = [f.name for f in dataclasses.fields(BertConfig) if f.metadata.get("ours") and not f.metadata.get("runtime")]
    assert [name for name in fields if f"`{name}`" not in rows] == []
