"""ModernBERT both ways with transformers' ModernBertModel and its heads: tiny random models (alternating
local and global layers, a window shorter than the sentences, two rotary bases), real text (CoLA pairs,
padded), outputs equal to 1e-5 in fp32 from a directory transformers wrote (read by us) and from one we
wrote (read by transformers' from_pretrained with no missing or unexpected keys)."""

import dataclasses
import json
from functools import partial

import pytest
import torch
import transformers

from helpers import cola_pairs_batch, perturb
from bert_exp.model import (BertConfig, BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification,
                            BertForTokenClassification, BertModel)
from bert_exp.model.hf import TIED_KEYS, Checkpoint, CheckpointError, save_hf_directory
from bert_exp.tasks.checkpoints import load_checkpoint

TOL = dict(atol=1e-5, rtol=1e-5)
BIASES = dict(attention_bias=True, mlp_bias=True, classifier_bias=True, norm_bias=True, decoder_bias=False)


@pytest.fixture(scope="module")
def text(data_dir):
    batch, vocab = cola_pairs_batch(data_dir)
    assert batch["attention_mask"].sum(1).max() > 12  # longer than the local window below
    return {k: v for k, v in batch.items() if k != "token_type_ids"}, vocab



def hf_config(vocab_size: int, **kw) -> transformers.ModernBertConfig:
    values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=48,
                  max_position_embeddings=128, local_attention=12, global_attn_every_n_layers=3, pad_token_id=0,
                  num_labels=3, global_rope_theta=160000.0, local_rope_theta=10000.0)
    return transformers.ModernBertConfig(**{**values, **kw})


def our_config(vocab_size: int, **kw) -> BertConfig:
    values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=48,
                  max_position_embeddings=128, layer_norm_eps=1e-5, pad_token_id=0, position_embedding_type="rotary",
                  rotary_base=160000.0, rotary_local_base=10000.0, local_attention=12, global_attention_every=3,
                  feed_forward="glu", layer_norm_position="pre", first_attention_norm=False, token_type_embeddings=False,
                  classifier_head="transform", dense_bias=False, norm_bias=False)
    return BertConfig(**{**values, **kw})


def compare(head, ours, ref, batch, pooling="cls"):
    """Our model's outputs against transformers' ``ref`` outputs at the real positions."""
    real = batch["attention_mask"].bool()
    args = (batch["input_ids"], None, batch["attention_mask"])
    with torch.no_grad():
        if head == "pretraining":
            mlm, nsp = ours(*args)
            assert nsp is None  # no pooler, no sentence task
            torch.testing.assert_close(mlm[real], ref.logits[real], **TOL)
        elif head == "classification":
            torch.testing.assert_close(ours(*args), ref.logits, **TOL)
        elif head == "token_classification":
            torch.testing.assert_close(ours(*args)[real], ref.logits[real], **TOL)
        elif head is None:
            seq, pooled = ours(*args)
            assert pooled is None
            torch.testing.assert_close(seq[real], ref.last_hidden_state[real], **TOL)
        else:
            start, end = ours(*args)
            torch.testing.assert_close(start[real], ref.start_logits[real], **TOL)
            torch.testing.assert_close(end[real], ref.end_logits[real], **TOL)


CASES = [  # (head, our model, transformers' class, ModernBERT options)
    ("pretraining", BertForPreTraining, transformers.ModernBertForMaskedLM, {}),
    ("pretraining", BertForPreTraining, transformers.ModernBertForMaskedLM, BIASES),
    (None, BertModel, transformers.ModernBertModel, {}),
    ("classification", partial(BertForSequenceClassification, num_labels=3),
     transformers.ModernBertForSequenceClassification, {}),
    ("classification", partial(BertForSequenceClassification, num_labels=3, pooling="mean"),
     transformers.ModernBertForSequenceClassification, {"classifier_pooling": "mean", **BIASES}),
    ("token_classification", partial(BertForTokenClassification, num_labels=3),
     transformers.ModernBertForTokenClassification, {}),
    ("question_answering", BertForQuestionAnswering, transformers.ModernBertForQuestionAnswering, {"num_labels": 2}),
]
IDS = [c[2].__name__ + ("-biases" if "attention_bias" in c[3] else "") + ("-mean" if "classifier_pooling" in c[3] else "")
       for c in CASES]


def our_options(options: dict) -> dict:
    """BertConfig's spelling of a ModernBERT test case's options."""
    out = {}
    if options.get("attention_bias"):
        out["dense_bias"] = True
    if "norm_bias" in options:
        out["norm_bias"] = options["norm_bias"]
    if "decoder_bias" in options:
        out["decoder_bias"] = options["decoder_bias"]
    return out


@pytest.mark.parametrize("head, ours_cls, hf_cls, options", CASES, ids=IDS)
def test_transformers_modernbert_directory_reads_with_equal_outputs(head, ours_cls, hf_cls, options, text, tmp_path):
    batch, vocab = text
    theirs = perturb(hf_cls(hf_config(len(vocab), **options)))
    theirs.save_pretrained(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.head == head
    assert ckpt.config == our_config(len(vocab), **our_options(options), hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    pooling = ckpt.extra.get("pooling", "cls")
    ours = (ours_cls(ckpt.config, pooling=pooling) if pooling != "cls" else ours_cls(ckpt.config)).eval()
    state = ckpt.state_dict if head else {k.removeprefix("bert."): v for k, v in ckpt.state_dict.items()}
    missing, unexpected = ours.load_state_dict(state, strict=False)
    allowed = set(TIED_KEYS) | {"cls.seq_relationship.weight", "cls.seq_relationship.bias"}
    assert set(missing) <= allowed and not unexpected, (missing, unexpected)
    with torch.no_grad():
        ref = theirs(**batch)
    compare(head, ours, ref, batch, pooling)


@pytest.mark.parametrize("head, ours_cls, hf_cls, options", CASES, ids=IDS)
def test_our_modernbert_export_loads_in_transformers_with_equal_outputs(head, ours_cls, hf_cls, options, text, tmp_path):
    batch, vocab = text
    config = our_config(len(vocab), **our_options(options))
    pooling = options.get("classifier_pooling", "cls")
    ours = perturb(ours_cls(config))
    state = ours.state_dict() if head else {"bert." + k: v for k, v in ours.state_dict().items()}
    num_labels = 3 if head in ("classification", "token_classification") else None
    ckpt = Checkpoint(config, state, vocab, False, head, num_labels, "run", extra={"pooling": pooling})
    save_hf_directory(ckpt, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == "modernbert" and written["architectures"] == [hf_cls.__name__]
    assert written["layer_types"] == ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]
    auto = {None: transformers.AutoModel, "pretraining": transformers.AutoModelForMaskedLM,
            "classification": transformers.AutoModelForSequenceClassification,
            "token_classification": transformers.AutoModelForTokenClassification,
            "question_answering": transformers.AutoModelForQuestionAnswering}[head]
    theirs, info = auto.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert type(theirs) is hf_cls
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    theirs.eval()
    with torch.no_grad():
        ref = theirs(**batch)
    compare(head, ours, ref, batch, pooling)
    back = load_checkpoint(tmp_path / "out")  # and back: the same config and weights
    assert back.config == config and back.head == head
    for key, value in ckpt.state_dict.items():
        if key in back.state_dict:
            assert torch.equal(value, back.state_dict[key]), key


def test_a_modernbert_with_options_it_lacks_is_refused_naming_them(tmp_path):
    config = our_config(64, position_embedding_type="rotary", token_type_embeddings=True, first_attention_norm=True)
    ckpt = Checkpoint(config, BertModel(config).state_dict(), None, False, None, None, "run")
    with pytest.raises(CheckpointError, match=r"^run: a model with model.first_attention_norm=True, "
                                              r"model.token_type_embeddings=True has no HuggingFace MODERNBERT"):
        save_hf_directory(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("values, message", [
    ({"layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"]},
     "is not a global layer every N layers"),
    ({"attention_bias": True}, "attention_bias=True, mlp_bias=False, classifier_bias=False"),
    ({"classifier_activation": "silu"}, "classifier_activation 'silu' differs from hidden_activation 'gelu'"),
])
def test_modernbert_configs_without_an_equivalent_are_one_line_errors(values, message, tmp_path):
    full = {"model_type": "modernbert", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 4, **values}
    (tmp_path / "config.json").write_text(json.dumps(full))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


def test_a_modernbert_on_the_hub_loads_as_its_directory_does(text, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from hub_server import LocalHub

    _, vocab = text
    transformers.ModernBertForMaskedLM(hf_config(len(vocab))).save_pretrained(tmp_path / "model")
    with LocalHub({"answerdotai/ModernBERT-tiny": tmp_path / "model"}) as server:
        monkeypatch.setattr(constants, "ENDPOINT", server.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        ckpt = load_checkpoint("hf:answerdotai/ModernBERT-tiny")
    local = load_checkpoint(tmp_path / "model")
    assert ckpt.config == local.config and ckpt.config.position_embedding_type == "rotary" and ckpt.head == "pretraining"
    assert ckpt.state_dict.keys() == local.state_dict.keys()
    assert all(torch.equal(ckpt.state_dict[k], v) for k, v in local.state_dict.items())
