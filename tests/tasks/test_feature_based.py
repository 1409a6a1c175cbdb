"""Feature-based use for every task (classification, question answering, tagging): a frozen encoder
gets no gradient and does not change over optimizer steps while the head learns; every layer
combination comes from one forward pass; the BiLSTM tagger ignores padding; and every trainable
parameter receives a gradient in each task's and objective's step, which is what DDP (with
find_unused_parameters=false) requires."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from bert_exp.model import BertConfig, BertForSequenceClassification, BertForTokenClassification
from bert_exp.model.features import LAYER_CHOICES
from bert_exp.model.hf import Checkpoint, CheckpointError, save_hf_directory
from bert_exp.tasks import (ClassificationModule, OptimSettings, PretrainingModule, QuestionAnsweringModule,
                            TokenClassificationModule)
from bert_exp.tasks.question_answering import span_loss
from bert_exp.tools.predict import build_model

TINY = dict(vocab_size=40, hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
OPTIM = OptimSettings(partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.01))


def batch_of(size=3, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY["vocab_size"], (size, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0  # one padded row
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
            "labels_cls": torch.randint(0, 2, (size,), generator=g),
            "labels_tag": torch.randint(0, 3, (size, length), generator=g),
            "start_positions": torch.randint(0, length, (size,), generator=g),
            "end_positions": torch.randint(0, length, (size,), generator=g)}


def make(task: str, config: BertConfig, **options):
    if task == "classification":
        return ClassificationModule(config, OPTIM, num_labels=2, **options)
    if task == "question_answering":
        return QuestionAnsweringModule(config, OPTIM, **options)
    return TokenClassificationModule(config, OPTIM, labels=["O", "B-X", "I-X"], **options)


def loss_of(task: str, module, batch):
    out = module(batch)
    if task == "classification":
        return F.cross_entropy(out, batch["labels_cls"])
    if task == "question_answering":
        return span_loss(*out, batch["start_positions"], batch["end_positions"])
    return F.cross_entropy(out.flatten(0, 1), batch["labels_tag"].flatten())


TASKS = ["classification", "question_answering", "token_classification"]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("layers", LAYER_CHOICES)
def test_frozen_encoder_does_not_change_while_the_head_learns(task, layers):
    torch.manual_seed(0)
    module = make(task, BertConfig(**TINY), encoder="frozen", layers=layers)
    module.train()
    assert not module.model.bert.training  # no dropout in a fixed feature extractor
    encoder_before = {k: v.clone() for k, v in module.model.bert.state_dict().items()}
    head_before = {k: v.clone() for k, v in module.model.state_dict().items() if not k.startswith("bert.")}
    calls = []
    for layer in module.model.bert.encoder.layer:
        layer.register_forward_hook(lambda *a: calls.append(1))
    optimizer = module.configure_optimizers()
    for step in range(3):
        optimizer.zero_grad()
        loss = loss_of(task, module, batch_of(seed=step))
        loss.backward()
        assert all(p.grad is None for p in module.model.bert.parameters())
        optimizer.step()
    assert len(calls) == 3 * TINY["num_hidden_layers"]  # one encoder pass a step, whatever the combination
    for key, value in module.model.bert.state_dict().items():
        assert torch.equal(value, encoder_before[key]), key
    changed = [k for k, v in module.model.state_dict().items() if not k.startswith("bert.") and not torch.equal(v, head_before[k])]
    assert changed and all(not k.startswith("bert.") for k in changed)


def test_frozen_step_keeps_no_encoder_activations_for_backward():
    """The speed of feature-based use: with the encoder frozen nothing in it is recorded for a backward
    pass, so the graph starts at the head."""
    module = make("classification", BertConfig(**TINY), encoder="frozen", layers="sum_last_4").train()
    features, _ = module.model.encode(batch_of()["input_ids"])
    assert features.grad_fn is None


def trainable_without_gradient(module, loss) -> list[str]:
    loss.backward()
    return [name for name, p in module.named_parameters() if p.requires_grad and p.grad is None]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("layers", LAYER_CHOICES)
@pytest.mark.parametrize("layer_norm_position", ["post", "pre"])
def test_every_trainable_parameter_gets_a_gradient_when_fine_tuning(task, layers, layer_norm_position):
    module = make(task, BertConfig(**TINY, layer_norm_position=layer_norm_position), layers=layers).train()
    assert trainable_without_gradient(module, loss_of(task, module, batch_of())) == []
    if layers == "second_to_last":  # the last layer is never read: frozen, not left waiting for DDP
        assert not module.model.bert.encoder.layer[-1].output.dense.weight.requires_grad


@pytest.mark.parametrize("objective", ["mlm_nsp", "mlm", "mlm_sop", "clm", "electra"])
def test_every_trainable_parameter_gets_a_gradient_in_pre_training(objective):
    config = BertConfig(**TINY, causal=objective == "clm")
    module = PretrainingModule(config, OPTIM, objective=objective).train()
    ids = batch_of()["input_ids"]
    positions = torch.tensor([[1, 2, 0], [3, 4, 5], [1, 7, 0]])
    labels = torch.tensor([[7, 8, -100], [9, 10, 11], [12, 13, -100]])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "masked_lm_positions": positions, "masked_lm_labels": labels,
             "next_sentence_label": torch.tensor([0, 1, 0]), "labels": ids}
    module.log = lambda *a, **k: None
    module.log_lr = lambda: None
    assert trainable_without_gradient(module, module.training_step(batch, 0)) == []


def test_bilstm_tagger_ignores_padding():
    torch.manual_seed(0)
    model = BertForTokenClassification(BertConfig(**TINY), 3, layers="concat_last_4", head_type="bilstm",
                                       lstm_size=16).eval()
    ids = torch.randint(5, TINY["vocab_size"], (1, 6))
    short = model(ids, None, torch.ones_like(ids))
    padded_ids = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 6, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long)], 1)
    padded = model(padded_ids, None, mask)
    torch.testing.assert_close(padded[:, :6], short, atol=1e-5, rtol=1e-5)
    assert model.lstm.num_layers == 2 and model.lstm.bidirectional


def test_bilstm_tagger_runs_under_bf16_autocast():
    model = BertForTokenClassification(BertConfig(**TINY), 3, head_type="bilstm").train()
    ids = batch_of()["input_ids"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, None, torch.ones_like(ids))
    logits.float().sum().backward()
    assert model.lstm.weight_ih_l0.grad is not None


def rebuilt_classifier(module, key: str, default: str):
    """(checkpoint, model rebuilt by predict) from the metadata a run's .ckpt would carry under ``key``;
    the rebuilt model gives the same logits."""
    from bert_exp.tasks.checkpoints import checkpoint_metadata
    meta = checkpoint_metadata(module)
    ckpt = Checkpoint(BertConfig(**TINY), module.model.state_dict(), None, True, "classification", 2, "test",
                      {key: meta.get(key, default)})
    rebuilt = build_model(ckpt)
    batch = batch_of()
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(batch["input_ids"], None, batch["attention_mask"]),
                                   module.model.eval()(batch["input_ids"], None, batch["attention_mask"]))
    return ckpt, rebuilt


@pytest.mark.parametrize("layers", ["second_to_last", "concat_last_4", "all"])
def test_feature_based_heads_rebuild_from_their_checkpoint_and_refuse_export(tmp_path, layers):
    module = make("classification", BertConfig(**TINY), encoder="frozen", layers=layers)
    ckpt, rebuilt = rebuilt_classifier(module, "layers", "last")
    assert isinstance(rebuilt, BertForSequenceClassification) and rebuilt.layers == layers
    with pytest.raises(CheckpointError, match="layers other than the last"):
        save_hf_directory(ckpt, tmp_path / "out")


def test_classification_on_other_layers_reads_the_cls_position_not_the_pooler():
    model = BertForSequenceClassification(BertConfig(**TINY), 2, layers="second_to_last").eval()
    ids = batch_of()["input_ids"]
    with torch.no_grad():
        before = model(ids)
        model.bert.pooler.dense.weight.mul_(3)
        torch.testing.assert_close(model(ids), before)
        _, _, hidden = model.bert(ids, output_hidden_states=True)
        torch.testing.assert_close(before, model.classifier(hidden[-2][:, 0]))


@pytest.mark.parametrize("layers", ["last", "sum_last_4"])
def test_mean_pooling_reads_the_mean_of_the_real_tokens_not_the_pooler(layers):
    model = BertForSequenceClassification(BertConfig(**TINY), 2, layers=layers, pooling="mean").eval()
    batch = batch_of()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        before = model(ids, None, mask)
        model.bert.pooler.dense.weight.mul_(3)  # the pooler is not read
        torch.testing.assert_close(model(ids, None, mask), before)
        features, _ = model.encode(ids, None, mask)
        # row 0 has 6 real tokens: its mean leaves out the 3 padded positions
        expected = torch.stack([features[0, :6].mean(0), features[1].mean(0), features[2].mean(0)])
        torch.testing.assert_close(before, model.classifier(expected))
    assert "bert.pooler." in model.unreached_prefixes()
    with pytest.raises(ValueError, match="pooling"):
        BertForSequenceClassification(BertConfig(**TINY), 2, pooling="max")


def test_mean_pooled_classifier_rebuilds_from_its_checkpoint_and_refuses_export(tmp_path):
    module = make("classification", BertConfig(**TINY), pooling="mean")
    ckpt, rebuilt = rebuilt_classifier(module, "pooling", "cls")
    assert ckpt.extra["pooling"] == "mean" and rebuilt.pooling == "mean"
    with pytest.raises(CheckpointError, match="pooling=mean"):
        save_hf_directory(ckpt, tmp_path / "out")


def test_mean_of_tokens_counts_long_masks_exactly_under_bf16():
    from bert_exp.model.features import mean_of_tokens
    sequence = torch.zeros(1, 300, 4, dtype=torch.bfloat16)
    sequence[0, :128] = 1
    mask = torch.ones(1, 300, dtype=torch.long)
    mask[0, 257:] = 0  # 257 real tokens: bf16 holds integers exactly only up to 256 (257 rounds to 256)
    mean = mean_of_tokens(sequence, mask)
    assert mean.dtype == torch.bfloat16
    torch.testing.assert_close(mean.float(), torch.full((1, 4), 128 / 257), atol=1e-3, rtol=0)  # not 128/256


def test_starting_from_a_classifier_trained_on_other_pooling_warns(caplog):
    trained = make("classification", BertConfig(**TINY), pooling="mean")
    ckpt = Checkpoint(BertConfig(**TINY), trained.model.state_dict(), None, True, "classification", 2, "mean-run",
                      {"pooling": "mean"})
    with caplog.at_level("WARNING", logger="bert_exp.tasks.base"):
        make("classification", BertConfig(**TINY)).initialise_from(ckpt)
    assert "mean-run was fine-tuned with task.module.pooling=mean; this run reads cls" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="bert_exp.tasks.base"):
        make("classification", BertConfig(**TINY), pooling="mean").initialise_from(ckpt)
    assert "pooling" not in caplog.text
