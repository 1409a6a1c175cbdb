import pytest
import torch
import transformers

from bert_exp.model import BertConfig, BertForPreTraining, BertModel, num_parameters

SIZES = {  # name: (layers, hidden, heads)
    "tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
    "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16),
}


def config_for(layers, hidden, heads, vocab=30522, **kw) -> BertConfig:
    return BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, intermediate_size=4 * hidden, **kw)


def hf_model(config: BertConfig, cls=transformers.BertForPreTraining):
    return cls(transformers.BertConfig(**config.hf_dict()))


@pytest.mark.parametrize("size", list(SIZES))
def test_parameter_count_equals_transformers(size):
    config = config_for(*SIZES[size])
    with torch.device("meta"):
        ours, theirs = BertForPreTraining(config), hf_model(config)
    assert num_parameters(ours) == sum(p.numel() for p in theirs.parameters())
    assert set(ours.state_dict()) == set(theirs.state_dict())
    expected = {"base": 110e6, "large": 335e6}.get(size)
    if expected:
        assert abs(num_parameters(ours) - expected) / expected < 0.02


def padded_batch(vocab=1000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 16), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[:, 8:] = 1
    return ids, types, mask


def test_outputs_equal_transformers_with_the_same_weights():
    config = config_for(2, 64, 4, vocab=1000)
    ours = BertForPreTraining(config).eval()
    theirs = hf_model(config).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    ids, types, mask = padded_batch()
    with torch.no_grad():
        mlm, nsp = ours(ids, types, mask)
        ref = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask)
    real = mask.bool()
    torch.testing.assert_close(mlm[real], ref.prediction_logits[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(nsp, ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)


def test_sparse_mlm_head_equals_dense_head_at_the_masked_positions():
    model = BertForPreTraining(config_for(2, 64, 4, vocab=1000)).eval()
    ids, types, mask = padded_batch()
    positions = torch.tensor([[1, 4, 9], [2, 3, 10], [0, 1, 4]])
    with torch.no_grad():
        dense, _ = model(ids, types, mask)
        sparse, _ = model(ids, types, mask, masked_lm_positions=positions)
    assert sparse.shape == (3, 3, 1000)
    torch.testing.assert_close(sparse, dense.gather(1, positions[..., None].expand(-1, -1, 1000)))


def test_padding_invariance():
    """Outputs at real tokens do not change when more padding is appended."""
    model = BertModel(config_for(2, 64, 4, vocab=1000)).eval()
    ids, types, mask = padded_batch()
    extra = 9
    pad = lambda t: torch.nn.functional.pad(t, (0, extra))  # noqa: E731
    with torch.no_grad():
        seq, pooled = model(ids, types, mask)
        seq_padded, pooled_padded = model(pad(ids), pad(types), pad(mask))
    real = mask.bool()
    torch.testing.assert_close(seq_padded[:, :16][real], seq[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pooled_padded, pooled, atol=1e-5, rtol=1e-5)


def test_initialisation_follows_bert():
    torch.manual_seed(0)
    config = config_for(2, 256, 4, vocab=4000)
    model = BertForPreTraining(config)
    for name, param in model.named_parameters():
        if "LayerNorm.weight" in name:
            assert torch.all(param == 1), name
        elif name.endswith("bias"):
            assert torch.all(param == 0), name
        else:
            # Five standard errors of the sample's mean and std: a bound that scales with the
            # tensor (the NSP head has 512 weights, the word embeddings 1M) and that a correct
            # N(0, 0.02) draw crosses about once in two million.
            n = param.numel()
            assert abs(param.std().item() - 0.02) < 5 * 0.02 / (2 * n) ** 0.5 + 1e-4, name
            assert abs(param.mean().item()) < 5 * 0.02 / n**0.5, name
    emb = model.bert.embeddings
    assert torch.all(emb.word_embeddings.weight[config.pad_token_id] == 0)
    assert model.cls.predictions.decoder.weight is emb.word_embeddings.weight  # tied
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias
    assert emb.LayerNorm.eps == 1e-12
    assert model.bert.encoder.layer[0].output.dropout.p == 0.1


def test_truncated_normal_initialisation_as_the_original():
    """The original's truncated_normal_initializer(0.02): normal draws beyond 2 sigma redrawn, so every
    weight lies within 2 sigma and the std is 0.02 * 0.8796 (that of a normal truncated at +-2)."""
    sigma = 0.02
    model = BertForPreTraining(config_for(1, 256, 4, initializer="truncated_normal"))
    words = model.bert.embeddings.word_embeddings.weight.detach()[1:]  # 7.8M weights ([PAD] is 0)
    assert words.abs().max() <= 2 * sigma
    assert words.std().item() == pytest.approx(0.8796 * sigma, rel=0.005)
    assert words.mean().abs() < 1e-4
    for name, param in model.named_parameters():
        if name.endswith("weight") and "LayerNorm" not in name:
            assert param.abs().max() <= 2 * sigma, name
    default = BertForPreTraining(config_for(1, 256, 4)).bert.embeddings.word_embeddings.weight.detach()[1:]
    assert default.abs().max() > 4 * sigma and default.std().item() == pytest.approx(sigma, rel=0.005)


def test_the_initializer_is_a_model_option():
    from hydra.utils import instantiate

    from helpers import compose_config

    cfg = compose_config(["+model.initializer=truncated_normal"])
    assert instantiate(cfg.model, vocab_size=100).initializer == "truncated_normal"
    assert instantiate(compose_config([]).model, vocab_size=100).initializer == "normal"
    with pytest.raises(ValueError, match="model.initializer='xavier'"):
        BertConfig(initializer="xavier")


def test_attention_uses_sdpa(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("attn_mask"))
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = BertModel(config_for(2, 64, 4, vocab=1000)).eval()
    ids, types, mask = padded_batch()
    model(ids, types, mask)
    assert len(calls) == 2 and calls[0].dtype == torch.bool and calls[0].shape == (3, 1, 1, 16)


def test_gelu_variants_match_transformers():
    for act, hf_act in (("gelu", "gelu"), ("gelu_tanh", "gelu_new")):
        config = config_for(1, 32, 2, vocab=100, hidden_act=act)
        ours = BertModel(config).eval()
        theirs = transformers.BertModel(transformers.BertConfig(**{**config.to_dict(), "hidden_act": hf_act})).eval()
        theirs.load_state_dict(ours.state_dict())
        ids = torch.randint(5, 100, (2, 7))
        torch.testing.assert_close(ours(ids)[0], theirs(input_ids=ids).last_hidden_state, atol=1e-5, rtol=1e-5)


def test_bad_config_is_a_clear_error():
    with pytest.raises(ValueError, match="num_attention_heads"):
        BertConfig(hidden_size=100, num_attention_heads=3)
