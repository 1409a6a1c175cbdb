"""What each BertConfig field is, said once in the config (``option``), and what derives from it: the
checkpoint compatibility check, the HuggingFace fields and the options a HuggingFace BERT cannot express (a causal checkpoint's mask, kept by the task:
tests/model/test_albert_options.py)."""

import dataclasses

import pytest

from bert_exp.model import BertConfig, BertForPreTraining
from bert_exp.model.hf import Checkpoint, CheckpointError
from bert_exp.tasks.base import check_compatible

TINY = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32)
# a valid other value for the string fields (the others are derived from their type below)
OTHER_STRINGS = {"hidden_act": "gelu_tanh", "initializer": "truncated_normal", "layer_norm_position": "pre",
                 "feed_forward": "glu", "position_embedding_type": "rotary", "classifier_head": "transform"}
# the settings another value needs beside it to make sense (set on both sides of a comparison)
COMPANIONS = {"rotary_local_base": dict(position_embedding_type="rotary", local_attention=8),
              "global_attention_every": dict(local_attention=8), "first_attention_norm": dict(layer_norm_position="pre"),
              "final_norm": dict(layer_norm_position="pre")}


def other_value(field: dataclasses.Field, value):
    if field.name in OTHER_STRINGS:
        return OTHER_STRINGS[field.name]
    if field.name == "final_norm":
        return False
    if isinstance(value, bool):
        return not value
    if value is None:
        return 8
    return value * 2 if value else 1  # an int or a float; twice the heads still divide twice the width


def checkpoint(config: BertConfig) -> Checkpoint:
    return Checkpoint(config=config, state_dict={}, head="pretraining", source="run/checkpoints/last.ckpt")


@pytest.mark.parametrize("field", dataclasses.fields(BertConfig), ids=lambda f: f.name)
def test_each_field_is_compared_unless_runtime_or_kept_from_the_checkpoint(field):
    configured = BertConfig(**TINY, **COMPANIONS.get(field.name, {}))
    theirs = dataclasses.replace(configured, **{field.name: other_value(field, getattr(configured, field.name))})
    if field.metadata.get("runtime") or field.metadata.get("kept_from_checkpoint"):
        check_compatible(configured, checkpoint(theirs))
        return
    with pytest.raises(CheckpointError, match=rf"run/checkpoints/last.ckpt does not fit the configured model: "
                                              rf"model\.{field.name}=.* but the checkpoint has "):
        check_compatible(configured, checkpoint(theirs))


def test_the_runtime_fields_are_dropout_initialisation_the_padding_row_unpadding_and_checkpointing():
    runtime = {f.name for f in dataclasses.fields(BertConfig) if f.metadata.get("runtime")}
    assert runtime == {"hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "initializer",
                       "pad_token_id", "unpad", "gradient_checkpointing"}


def test_a_pre_ln_checkpoint_is_refused_by_a_post_ln_model_naming_the_field():
    pre = BertConfig(**TINY, layer_norm_position="pre")
    ckpt = Checkpoint(config=pre, state_dict=BertForPreTraining(pre).state_dict(), head="pretraining",
                      source="pre_ln_run")
    with pytest.raises(CheckpointError, match="model.layer_norm_position='post' but the checkpoint has 'pre'"):
        check_compatible(BertConfig(**TINY), ckpt)


def test_several_mismatches_are_one_line():
    theirs = BertConfig(**{**TINY, "hidden_size": 32}, layer_norm_eps=1e-5)
    with pytest.raises(CheckpointError) as error:
        check_compatible(BertConfig(**TINY), checkpoint(theirs))
    message = str(error.value)
    assert "\n" not in message and "model.hidden_size=16" in message and "model.layer_norm_eps=1e-12" in message


def test_hf_fields_and_non_bert_options_follow_the_declarations():
    ours = {f.name for f in dataclasses.fields(BertConfig) if f.metadata.get("ours")}
    config = BertConfig(**TINY)
    assert not ours & set(config.hf_dict()) and set(config.hf_dict()) | ours == set(config.to_dict())
    assert config.non_bert_options() == {}
    for field in dataclasses.fields(BertConfig):
        changed = dataclasses.replace(config, **COMPANIONS.get(field.name, {}),
                                      **{field.name: other_value(field, getattr(config, field.name))})
        architecture_of_ours = field.metadata.get("ours") and not field.metadata.get("runtime")
        assert (field.name in changed.non_bert_options()) == bool(architecture_of_ours), field.name

