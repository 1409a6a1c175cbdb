"""model.layer_norm_position=pre: LayerNorm on each sub-layer's input and after the last layer."""

import pytest
import torch
import torch.nn.functional as F

from bert_exp.model import BertConfig, BertForPreTraining, BertModel
from bert_exp.model.hf import Checkpoint, CheckpointError, save_hf_directory


def tiny(**kw) -> BertConfig:
    values = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **kw})


def reference_pre_ln(model: BertModel, ids: torch.Tensor) -> torch.Tensor:
    """The pre-LN encoder written out from its weights: x + Attn(LN(x)), then x + FFN(LN(x)), then a final LN."""
    config = model.config
    x = model.embeddings(ids, None)
    heads, d = config.num_attention_heads, config.head_dim
    for layer in model.encoder.layer:
        att = layer.attention
        h = att.output.LayerNorm(x)
        q, k, v = (lin(h).view(*h.shape[:2], heads, d).transpose(1, 2)
                   for lin in (att.self.query, att.self.key, att.self.value))
        probs = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        context = (probs @ v).transpose(1, 2).reshape(h.shape)
        x = x + att.output.dense(context)
        h = layer.output.LayerNorm(x)
        x = x + layer.output.dense(F.gelu(layer.intermediate.dense(h)))
    return model.encoder.LayerNorm(x)


def test_pre_ln_forward_equals_the_written_out_formula():
    torch.manual_seed(0)
    model = BertModel(tiny(layer_norm_position="pre")).eval()
    ids = torch.randint(5, 100, (3, 9))
    with torch.no_grad():
        out, _, hidden = model(ids, output_hidden_states=True)
        expected = reference_pre_ln(model, ids)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden[-1], out)  # "last" features are what the heads see


def test_post_ln_is_unchanged_and_pre_ln_adds_only_the_final_layernorm():
    torch.manual_seed(0)
    post, pre = BertModel(tiny()), BertModel(tiny(layer_norm_position="pre"))
    with torch.no_grad():  # weights large enough that where the LayerNorms sit shows in the output
        for p in post.parameters():
            p.normal_(0.0, 0.5)
    assert set(pre.state_dict()) - set(post.state_dict()) == {"encoder.LayerNorm.weight", "encoder.LayerNorm.bias"}
    assert not hasattr(post.encoder, "LayerNorm")
    pre.load_state_dict(post.state_dict(), strict=False)
    ids = torch.randint(5, 100, (2, 6))
    with torch.no_grad():
        assert not torch.allclose(pre(ids)[0], post(ids)[0], atol=1e-3)  # same weights, other computation


def test_every_parameter_of_a_pre_ln_model_gets_a_gradient():
    model = BertForPreTraining(tiny(layer_norm_position="pre"))
    ids = torch.randint(5, 100, (2, 8))
    mlm, nsp = model(ids, torch.zeros_like(ids), torch.ones_like(ids), torch.tensor([[1, 2], [3, 4]]))
    (mlm.sum() + nsp.sum()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert not missing


def test_unknown_position_is_refused_and_export_as_bert_is_refused(tmp_path):
    with pytest.raises(ValueError, match="layer_norm_position"):
        tiny(layer_norm_position="sandwich")
    config = tiny(layer_norm_position="pre")
    assert config.non_bert_options() == {"layer_norm_position": "pre"}
    assert "layer_norm_position" not in config.hf_dict()
    model = BertForPreTraining(config)
    with pytest.raises(CheckpointError, match="layer_norm_position"):
        save_hf_directory(Checkpoint(config=config, state_dict=model.state_dict(), head="pretraining"), tmp_path)
