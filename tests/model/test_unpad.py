"""model.unpad: the layers on the batch's real tokens laid end to end. Every head's outputs at the real
positions, and every parameter's gradient, equal the padded path's (fp32, 1e-5), for BERT and for the
options whose attention differs (rotary with local windows, ALiBi, causal); ``auto`` unpads only a
batch with padding to remove; the passes that need the padded batch say so and run padded."""

import dataclasses
from functools import partial

import pytest
import torch

from bert_exp.model import modeling
from bert_exp.model import (BertConfig, BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering,
                            BertForSequenceClassification, BertForTokenClassification, BertModel,
                            ElectraForPreTraining)

VOCAB = 100
SHAPES = {
    "bert": {},
    "modernbert": dict(position_embedding_type="rotary", local_attention=4, global_attention_every=2,
                       feed_forward="glu", layer_norm_position="pre", first_attention_norm=False,
                       token_type_embeddings=False, classifier_head="transform", dense_bias=False),
    "alibi_albert": dict(position_embedding_type="alibi", embedding_size=16, share_layers=True),
}


def config(shape: str = "bert", **kw) -> BertConfig:
    values = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **SHAPES[shape], **kw})


def batch(seed: int = 0, lengths=(11, 4, 7, 2)):
    torch.manual_seed(seed)
    ids = torch.randint(5, VOCAB, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]).long()
    types = (torch.arange(max(lengths))[None] >= 3).long() * mask
    return ids * mask, types, mask


def real_outputs(outputs, mask):
    """Each output tensor's real positions (a per-sequence output whole)."""
    flat = outputs if isinstance(outputs, tuple) else (outputs,)
    return [o[mask.bool()] if o.dim() >= 2 and o.shape[:2] == mask.shape else o for o in flat if o is not None]


HEADS = {  # name -> (model, how it is called)
    "pretraining": (BertForPreTraining, lambda m, ids, types, mask: m(ids, types, mask, torch.tensor([[0, 1]] * 4))),
    "pretraining_dense": (BertForPreTraining, lambda m, ids, types, mask: m(ids, types, mask)),
    "classification": (partial(BertForSequenceClassification, num_labels=3), None),
    "regression_mean": (partial(BertForSequenceClassification, num_labels=1, pooling="mean"), None),
    "concat_last_4": (partial(BertForSequenceClassification, num_labels=2, layers="concat_last_4"), None),
    "tagging": (partial(BertForTokenClassification, num_labels=5), None),
    "tagging_bilstm": (partial(BertForTokenClassification, num_labels=5, head_type="bilstm"), None),
    "question_answering": (BertForQuestionAnswering, None),
}


def pair(model_cls, cfg: BertConfig):
    """The same weights with model.unpad off and on."""
    torch.manual_seed(0)
    padded = model_cls(cfg)
    unpadded = model_cls(dataclasses.replace(cfg, unpad=True))
    unpadded.load_state_dict(padded.state_dict())
    return padded, unpadded


# every head at every shape (ModernBERT's has no pooler, hence no NSP logits: its pre-training is the dense case)
CASES = [(head, shape) for shape in SHAPES for head in HEADS if (head, shape) != ("pretraining", "modernbert")]


# how the rows (lengths 11, 4, 11, 2) share attention's grids, by the cost of a grid: all four on one grid
# padded to 11; the two of 11 on a grid they fill and the others on one padded to 4; each length its own
GRIDS = {modeling.ATTENTION_GRID_COST: [[11, 11, 4, 2]], 50: [[11, 11], [4, 2]], 0: [[11, 11], [4], [2]]}


def grid_lengths(mask) -> list[list[int]]:
    lengths = mask.sum(1)
    return [lengths[grid.rows].tolist() for grid in modeling.Unpadded.of(mask).grids]


@pytest.mark.parametrize("grid_cost", GRIDS)
@pytest.mark.parametrize("head, shape", CASES)
def test_outputs_and_gradients_equal_the_padded_path(head, shape, grid_cost, monkeypatch):
    monkeypatch.setattr(modeling, "ATTENTION_GRID_COST", grid_cost)
    model_cls, call = HEADS[head]
    call = call or (lambda m, ids, types, mask: m(ids, types, mask))
    padded, unpadded = pair(model_cls, config(shape))
    ids, types, mask = batch(lengths=(11, 4, 11, 2))
    assert grid_lengths(mask) == GRIDS[grid_cost]
    results = []
    for model in (padded, unpadded):
        model.train()  # no dropout configured: the training pass, deterministic
        outputs = real_outputs(call(model, ids, types, mask), mask)
        sum(o.float().pow(2).sum() for o in outputs).backward()
        results.append((outputs, {n: p.grad for n, p in model.named_parameters()}))
    (out_p, grad_p), (out_u, grad_u) = results
    for a, b in zip(out_p, out_u):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    assert grad_p.keys() == grad_u.keys()
    for name in grad_p:
        if grad_p[name] is None:
            assert grad_u[name] is None, name
        else:
            torch.testing.assert_close(grad_u[name], grad_p[name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_causal_lm_and_electra_equal_the_padded_path():
    ids, types, mask = batch()
    padded, unpadded = pair(BertForMaskedLM, config(causal=True))
    with torch.no_grad():
        torch.testing.assert_close(unpadded(ids, types, mask)[mask.bool()], padded(ids, types, mask)[mask.bool()],
                                   atol=1e-5, rtol=1e-5)
    padded, unpadded = pair(ElectraForPreTraining, config())
    positions = torch.tensor([[0, 1]] * 4)
    with torch.no_grad():
        torch.testing.assert_close(unpadded.generate(ids, types, mask, positions), padded.generate(ids, types, mask, positions),
                                   atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(unpadded.discriminate(ids, types, mask)[mask.bool()],
                                   padded.discriminate(ids, types, mask)[mask.bool()], atol=1e-5, rtol=1e-5)


def test_hidden_states_are_unpacked_and_auto_unpads_only_padded_batches():
    padded, unpadded = pair(BertModel, config())
    ids, types, mask = batch()
    with torch.no_grad():
        hidden_p = padded(ids, types, mask, output_hidden_states=True)[2]
        hidden_u = unpadded(ids, types, mask, output_hidden_states=True)[2]
    assert len(hidden_u) == 4 and all(h.shape == (4, 11, 32) for h in hidden_u)
    for a, b in zip(hidden_p, hidden_u):
        torch.testing.assert_close(b[mask.bool()], a[mask.bool()], atol=1e-5, rtol=1e-5)
        assert not b[~mask.bool()].any()  # the padding is zeros, never computed
    auto = BertModel(config(unpad="auto"))
    assert auto.unpads(mask) and not auto.unpads(torch.ones(4, 11, dtype=torch.long)) and not auto.unpads(None)
    assert not BertModel(config()).unpads(mask)


def test_attention_probabilities_run_padded_and_say_so():
    padded, unpadded = pair(BertModel, config())
    ids, types, mask = batch()
    with pytest.warns(UserWarning, match="model.unpad=true: this pass runs padded"), torch.no_grad():
        probs_u = unpadded(ids, types, mask, output_attentions=True)[-1]
    with torch.no_grad():
        probs_p = padded(ids, types, mask, output_attentions=True)[-1]
    for a, b in zip(probs_p, probs_u):
        torch.testing.assert_close(b, a)


def test_unpad_is_how_not_what_and_a_bad_value_is_one_line():
    field = {f.name: f for f in dataclasses.fields(BertConfig)}["unpad"]
    assert field.metadata["runtime"]  # checkpoints fit either way; never part of an export
    assert "unpad" not in config(unpad=True).hf_dict() and config(unpad=True).non_bert_options() == {}
    with pytest.raises(ValueError, match=r"^model.unpad='sometimes': expected true, false or auto$"):
        config(unpad="sometimes")


def test_rows_padded_on_the_left_share_one_grid_and_equal_the_padded_path():
    padded, unpadded = pair(BertModel, config())
    ids, types, mask = batch()
    mask, ids, types = mask.flip(1), ids.flip(1), types.flip(1)  # the padding first
    assert grid_lengths(mask) == [[11, 4, 7, 2]]
    with torch.no_grad():
        torch.testing.assert_close(unpadded(ids, types, mask)[0][mask.bool()], padded(ids, types, mask)[0][mask.bool()],
                                   atol=1e-5, rtol=1e-5)


def test_length_groups_are_the_cheapest_cut():
    """Against every way of cutting the sorted lengths into runs: the least rows x longest^2 + cost each."""
    import itertools

    def cost(lengths, starts, per_grid):
        ends = starts[1:] + [len(lengths)]
        return sum((e - s) * lengths[s] ** 2 + per_grid for s, e in zip(starts, ends))

    torch.manual_seed(0)
    for per_grid in (0, 30, 500, 4096):
        lengths = sorted(torch.randint(1, 60, (9,)).tolist(), reverse=True)
        cuts = [[0, *c] for r in range(len(lengths)) for c in itertools.combinations(range(1, len(lengths)), r)]
        best = min(cost(lengths, c, per_grid) for c in cuts)
        assert cost(lengths, modeling.length_groups(lengths, per_grid), per_grid) == best
