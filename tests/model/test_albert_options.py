"""ALBERT's model options (factorised embedding, shared layers) and the causal mask."""

import pytest
import torch

from bert_exp.model import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel, parameter_counts
from bert_exp.model.hf import Checkpoint, CheckpointError, hf_config_dict, save_hf_directory
from bert_exp.tasks import OptimSettings


def tiny(**kw) -> BertConfig:
    values = dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **kw})


def embedding_parameters(config: BertConfig) -> int:
    """Word, position and token-type embeddings, their LayerNorm, and ALBERT's projection to the hidden
    size, as run.json reports them (``parameters.embeddings``)."""
    return parameter_counts(BertForPreTraining(config))["embeddings"]


def test_embedding_parameter_counts_of_bert_base_and_albert_base():
    # BERT-base: 30522x768 + 512x768 + 2x768 + LayerNorm 2x768
    assert 30522 * 768 + 512 * 768 + 2 * 768 + 2 * 768 == 23_837_184
    assert embedding_parameters(BertConfig(num_hidden_layers=1)) == 23_837_184
    # ALBERT-base (E=128, vocabulary 30000): 30000x128 + 512x128 + 2x128 + LayerNorm 2x128 = 3,906,048,
    # plus the projection 128x768 + 768 = 99,072
    albert = BertConfig(vocab_size=30000, embedding_size=128, num_hidden_layers=1)
    assert embedding_parameters(albert) == 4_005_120 == 3_906_048 + 128 * 768 + 768
    counts = parameter_counts(BertForPreTraining(albert))
    assert counts["total"] == counts["embeddings"] + counts["encoder"] + counts["heads"]
    assert counts["total"] == sum(p.numel() for p in BertForPreTraining(albert).parameters())


def test_factorised_embedding_shapes_and_tied_decoder():
    model = BertForPreTraining(tiny(embedding_size=8))
    assert model.bert.embeddings.word_embeddings.weight.shape == (100, 8)
    assert model.bert.encoder.embedding_hidden_mapping_in.weight.shape == (32, 8)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    ids = torch.randint(5, 100, (2, 10))
    mlm, nsp = model(ids, torch.zeros_like(ids), torch.ones_like(ids), torch.tensor([[1, 2], [3, 4]]))
    assert mlm.shape == (2, 2, 100) and nsp.shape == (2, 2)


def test_shared_layers_hold_one_layer_and_apply_it_at_every_depth():
    shared, plain = BertModel(tiny(share_layers=True)), BertModel(tiny())
    layer_params = sum(p.numel() for p in plain.encoder.layer[0].parameters())
    assert sum(p.numel() for p in plain.parameters()) - sum(p.numel() for p in shared.parameters()) == 2 * layer_params
    assert not any(".layer.1." in name for name in shared.state_dict())
    ids = torch.randint(5, 100, (2, 7))
    _, _, hidden = shared(ids, output_hidden_states=True)
    assert len(hidden) == 4  # embeddings + 3 applications of the one layer
    layer = shared.encoder.layer[0]
    with torch.no_grad():
        x = hidden[0]
        for _ in range(3):
            x = layer(x, None)
    torch.testing.assert_close(x, hidden[-1])


def test_causal_mask_blocks_the_future():
    torch.manual_seed(0)
    model = BertModel(tiny(causal=True)).eval()
    ids = torch.randint(5, 100, (1, 12))
    changed = ids.clone()
    changed[0, 8:] = torch.randint(5, 100, (4,))
    with torch.no_grad():
        a, _ = model(ids, attention_mask=torch.ones_like(ids))
        b, _ = model(changed, attention_mask=torch.ones_like(ids))
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])
    # without the option the same change reaches every position
    bidirectional = BertModel(tiny()).eval()
    with torch.no_grad():
        c, _ = bidirectional(ids)
        d, _ = bidirectional(changed)
    assert not torch.allclose(c[:, :8], d[:, :8])


def test_causal_with_padding_matches_the_unpadded_sequence_and_pools_the_last_token():
    torch.manual_seed(0)
    model = BertModel(tiny(causal=True)).train()  # training mode: the CPU dropout path (rates 0 here)
    model.eval()
    ids = torch.randint(5, 100, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 3])
    with torch.no_grad():
        seq, pooled = model(ids)
        seq_p, pooled_p = model(padded, attention_mask=mask)
    torch.testing.assert_close(seq, seq_p[:, :6])
    torch.testing.assert_close(pooled, pooled_p)
    torch.testing.assert_close(pooled, torch.tanh(model.pooler.dense(seq[:, -1])))


def test_causal_attention_with_cpu_dropout_path_still_blocks_the_future():
    torch.manual_seed(0)
    model = BertModel(tiny(causal=True, attention_probs_dropout_prob=0.1)).train()
    ids = torch.randint(5, 100, (1, 10))
    changed = ids.clone()
    changed[0, 9] = (ids[0, 9] + 1) % 100
    torch.manual_seed(1)
    a, _ = model(ids)
    torch.manual_seed(1)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9])


@pytest.mark.parametrize("option", [{"embedding_size": 8}, {"share_layers": True}])
def test_albert_options_export_as_albert_with_our_own_fields_left_out(option, tmp_path):
    config = tiny(**option)
    ckpt = Checkpoint(config, BertForPreTraining(config).state_dict(), head="pretraining", source="run")
    values = hf_config_dict(ckpt)
    assert values["model_type"] == "albert" and values["architectures"] == ["AlbertForPreTraining"]
    assert not set(values) & {"share_layers", "causal", "initializer", "layer_norm_position"}
    save_hf_directory(ckpt, tmp_path / "out")  # the parity: tests/model/test_albert_hf.py


def test_causal_stays_out_of_config_json_and_refuses_export(tmp_path):
    config = tiny(causal=True)
    ckpt = Checkpoint(config, BertForPreTraining(config).state_dict(), head="pretraining", source="run")
    assert "causal" not in hf_config_dict(ckpt)
    with pytest.raises(CheckpointError, match="model.causal=True.*no HuggingFace BERT equivalent"):
        save_hf_directory(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_plain_bert_config_is_unchanged():
    config = BertConfig()
    assert config.non_bert_options() == {}
    assert not {"embedding_size", "share_layers", "causal"} & set(config.hf_dict())


def test_a_task_started_from_a_causal_checkpoint_keeps_the_mask():
    from bert_exp.tasks import ClassificationModule

    source = tiny(causal=True)
    ckpt = Checkpoint(source, BertForPreTraining(source).state_dict(), head="pretraining", source="clm-run")
    module = ClassificationModule(model_config=tiny(), optim=OptimSettings(torch.optim.AdamW), num_labels=2)
    module.initialise_from(ckpt)
    assert module.config.causal and module.model.bert.pooler.causal
    ids = torch.randint(5, 100, (1, 8))
    changed = ids.clone()
    changed[0, 7] = (ids[0, 7] + 1) % 100
    module.eval()
    with torch.no_grad():
        a, _ = module.model.bert(ids)
        b, _ = module.model.bert(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])


def test_classification_on_albert_options_runs():
    model = BertForSequenceClassification(tiny(embedding_size=8, share_layers=True), num_labels=3)
    ids = torch.randint(5, 100, (2, 5))
    assert model(ids).shape == (2, 3)
