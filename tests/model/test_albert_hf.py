"""ALBERT both ways with HuggingFace transformers: tiny random models, real text (CoLA), outputs equal to
1e-5 from a directory transformers wrote (read by us) and from one we wrote (read by transformers'
from_pretrained with no missing or unexpected keys)."""

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
from bert_exp.tasks import ClassificationModule, OptimSettings
from bert_exp.tasks.checkpoints import checkpoint_config, load_checkpoint

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def text(data_dir):
    return cola_pairs_batch(data_dir)



def hf_albert(vocab_size: int, groups: int, **kw) -> transformers.AlbertConfig:
    values = dict(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=groups,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)  # hidden_act: gelu_new
    return transformers.AlbertConfig(**{**values, **kw})


@pytest.mark.parametrize("groups", [1, 3], ids=["shared", "one_group_a_layer"])
def test_transformers_albert_directory_reads_with_equal_outputs(groups, text, tmp_path):
    batch, vocab = text
    theirs = perturb(transformers.AlbertForPreTraining(hf_albert(len(vocab), groups)))
    theirs.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.head == "pretraining" and ckpt.vocab == vocab
    assert (ckpt.config.embedding_size, ckpt.config.share_layers, ckpt.config.hidden_act) == (16, groups == 1, "gelu_tanh")
    ours = BertForPreTraining(ckpt.config).eval()
    missing, unexpected = ours.load_state_dict(ckpt.state_dict, strict=False)
    assert set(missing) == set(TIED_KEYS) and not unexpected  # the tied aliases
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ref = theirs(**batch)
        ref_seq = theirs.albert(**batch).last_hidden_state
        mlm, sop = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        seq, _ = ours.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    torch.testing.assert_close(seq[real], ref_seq[real], **TOL)
    torch.testing.assert_close(mlm[real], ref.prediction_logits[real], **TOL)
    torch.testing.assert_close(sop, ref.sop_logits, **TOL)


CASES = [  # (our options, head, our model, transformers' class)
    ({"embedding_size": 16, "share_layers": True}, "pretraining", BertForPreTraining, transformers.AlbertForPreTraining),
    ({"embedding_size": 16}, "classification", partial(BertForSequenceClassification, num_labels=3),
     transformers.AlbertForSequenceClassification),
    ({"share_layers": True}, None, BertModel, transformers.AlbertModel),
    ({"embedding_size": 16, "share_layers": True}, "question_answering", BertForQuestionAnswering,
     transformers.AlbertForQuestionAnswering),
    ({"embedding_size": 16, "share_layers": True}, "token_classification", partial(BertForTokenClassification, num_labels=3),
     transformers.AlbertForTokenClassification),
]


@pytest.mark.parametrize("options, head, ours_cls, hf_cls", CASES, ids=[c[3].__name__ for c in CASES])
def test_our_albert_export_loads_in_transformers_with_equal_outputs(options, head, ours_cls, hf_cls, text, tmp_path):
    batch, vocab = text
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, hidden_act="gelu_tanh", **options)
    ours = perturb(ours_cls(config))
    state = ours.state_dict() if head else {"bert." + k: v for k, v in ours.state_dict().items()}  # encoder under bert.
    num_labels = 3 if head in ("classification", "token_classification") else None
    ckpt = Checkpoint(config, state, vocab, True, head, num_labels, "run")
    save_hf_directory(ckpt, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == "albert" and written["architectures"] == [hf_cls.__name__]
    assert written["num_hidden_groups"] == (1 if config.share_layers else 3) and "share_layers" not in written
    theirs, info = hf_cls.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    theirs.eval()
    real = batch["attention_mask"].bool()
    args = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        ref = theirs(**batch)
        if head == "pretraining":
            mlm, sop = ours(*args)
            torch.testing.assert_close(mlm[real], ref.prediction_logits[real], **TOL)
            torch.testing.assert_close(sop, ref.sop_logits, **TOL)
        elif head == "classification":
            torch.testing.assert_close(ours(*args), ref.logits, **TOL)
        elif head == "token_classification":
            torch.testing.assert_close(ours(*args)[real], ref.logits[real], **TOL)
        elif head is None:
            seq, pooled = ours(*args)
            torch.testing.assert_close(seq[real], ref.last_hidden_state[real], **TOL)
            torch.testing.assert_close(pooled, ref.pooler_output, **TOL)
        else:
            start, end = ours(*args)
            torch.testing.assert_close(start[real], ref.start_logits[real], **TOL)
            torch.testing.assert_close(end[real], ref.end_logits[real], **TOL)
    # and back: the same config (ALBERT always projects: without embedding_size, an identity of hidden_size)
    back = load_checkpoint(tmp_path / "out")
    assert back.config == dataclasses.replace(config, embedding_size=config.embedding_width) and back.head == head
    for key, value in ckpt.state_dict.items():
        if key in back.state_dict:
            assert torch.equal(value, back.state_dict[key]), key


def test_fine_tuning_starts_from_a_transformers_albert_directory(text, tmp_path):
    _, vocab = text
    transformers.AlbertModel(hf_albert(len(vocab), 1)).save_pretrained(tmp_path)
    config = checkpoint_config(tmp_path)  # model=from_checkpoint reads the shape alone
    assert config.share_layers and config.embedding_size == 16
    module = ClassificationModule(config, optim=OptimSettings(torch.optim.AdamW), num_labels=2)
    module.initialise_from(load_checkpoint(tmp_path))
    assert sorted(module.fresh_parameters) == ["classifier.bias", "classifier.weight"]


@pytest.mark.parametrize("layout", [{"inner_group_num": 2}, {"num_hidden_groups": 2}])
def test_albert_layouts_without_an_equivalent_are_one_line_errors(layout, tmp_path):
    values = {"model_type": "albert", "hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 4, **layout}
    (tmp_path / "config.json").write_text(json.dumps(values))
    with pytest.raises(CheckpointError, match=r"config.json: ALBERT with num_hidden_groups=\d, inner_group_num=\d "
                                              r"has no equivalent"):
        load_checkpoint(tmp_path)


def test_a_causal_albert_is_still_refused(tmp_path):
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, embedding_size=16, causal=True)
    ckpt = Checkpoint(config, BertForPreTraining(config).state_dict(), head="pretraining", source="clm-run")
    with pytest.raises(CheckpointError, match=r"clm-run: a model with model.causal=True has no HuggingFace ALBERT"):
        save_hf_directory(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()
