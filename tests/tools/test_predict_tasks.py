"""python -m bert_exp.predict on tiny checkpoints made here: fill-mask from a pre-training .ckpt (equal to
transformers' fill-mask pipeline on its export), the input formats, and one message per mistake."""

import json
from functools import partial

import pytest
import torch
import transformers

from bert_exp import Predictor
from bert_exp.model import BertConfig
from bert_exp.tasks import (
    ClassificationModule,
    PretrainingModule,
    TokenClassificationModule,
)
from bert_exp.tools.export import main as export_main
from bert_exp.tools.predict import main as predict_main
from bert_exp.tasks import OptimSettings, Vocabulary

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "table", "and", "is", "big", "small",
         "john", "lives", "in", "new", "york", ".", ",", "##s", "##ed"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(64 - 5 - len(WORDS))]
TINY = BertConfig(vocab_size=64, num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=32)


def save_ckpt(module, path):
    checkpoint = {"state_dict": {f"model.{k}": v for k, v in module.model.state_dict().items()}, "global_step": 1}
    module.on_save_checkpoint(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    torch.manual_seed(0)
    opt = partial(torch.optim.AdamW)
    pre = PretrainingModule(TINY, optim=OptimSettings(opt), vocabulary=Vocabulary(VOCAB))
    with torch.no_grad():  # a random model is nearly uniform over the vocabulary: make its choices clear
        pre.model.cls.predictions.bias.normal_(0, 2)
    cls = ClassificationModule(TINY, optim=OptimSettings(opt), vocabulary=Vocabulary(VOCAB), num_labels=3)
    tag = TokenClassificationModule(TINY, optim=OptimSettings(opt), vocabulary=Vocabulary(VOCAB), labels=["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
    with torch.no_grad():
        tag.model.classifier.weight.normal_(0, 2)
    return {"pretraining": save_ckpt(pre, root / "pre_run" / "checkpoints" / "last.ckpt").parent.parent,
            "classification": save_ckpt(cls, root / "cls.ckpt"), "tagging": save_ckpt(tag, root / "tag.ckpt"),
            "root": root}


def test_fill_mask_equals_the_transformers_pipeline(checkpoints):
    run_dir = checkpoints["pretraining"]
    texts = ["the cat [MASK] on the mat .", "a [MASK] ran under the [MASK] ."]
    ours = Predictor(run_dir, top_k=5).fill_mask(texts)
    exported = checkpoints["root"] / "pre_hf"
    assert export_main([str(run_dir), str(exported)]) == 0
    pipe = transformers.pipeline("fill-mask", model=str(exported), device="cpu")
    for text, result in zip(texts, ours):
        theirs = pipe(text, top_k=5)
        theirs = theirs if isinstance(theirs[0], list) else [theirs]
        assert len(result["masks"]) == len(theirs)
        for mask, ref in zip(result["masks"], theirs):
            assert [p["token_id"] for p in mask["predictions"]] == [r["token"] for r in ref]
            for p, r in zip(mask["predictions"], ref):
                assert p["score"] == pytest.approx(r["score"], abs=1e-5)
                assert p["token"] == r["token_str"].replace(" ", "")
            assert text[mask["start"]:mask["end"]] == "[MASK]"
    assert "[MASK]" not in ours[0]["filled"] and ours[0]["filled"].startswith("the cat ")


def test_cli_fill_mask_json_lines(checkpoints, capsys):
    assert predict_main([str(checkpoints["pretraining"]), "the [MASK] sat .", "--top-k", "3"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["text"] == "the [MASK] sat ." and len(record["masks"][0]["predictions"]) == 3
    scores = [p["score"] for p in record["masks"][0]["predictions"]]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


def test_classification_pairs_from_tsv_batched_and_bf16(checkpoints, tmp_path):
    tsv = tmp_path / "pairs.tsv"
    rows = [("the cat sat .", "a dog ran ."), ("the big table", "the small mat"), ("john", "new york")] * 5
    tsv.write_text("\n".join("\t".join(r) for r in rows) + "\n")
    out = tmp_path / "out.jsonl"
    assert predict_main([str(checkpoints["classification"]), "--file", str(tsv), "--output", str(out),
                         "--batch-size", "4"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["text"], r["text_pair"]) for r in records] == rows
    assert all(set(r["probabilities"]) == {"LABEL_0", "LABEL_1", "LABEL_2"} for r in records)
    one_by_one = Predictor(checkpoints["classification"], batch_size=1).classify(*map(list, zip(*rows)))
    for a, b in zip(records, one_by_one):  # padding and length grouping change nothing
        assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-5)
    bf16 = Predictor(checkpoints["classification"], precision="bf16").classify(["the cat sat ."], ["a dog ran ."])
    assert bf16[0]["score"] == pytest.approx(records[0]["score"], abs=0.05)


def test_tagging_labels_every_word_once_across_windows(checkpoints):
    text = " ".join(["john lives in new york and the cat sat on the mat ."] * 6)  # 78 words, 32 positions
    predictor = Predictor(checkpoints["tagging"])
    result = predictor.tag([text])[0]
    assert [w["word"] for w in result["words"]] == text.split()
    assert all(text[w["start"]:w["end"]] == w["word"] for w in result["words"])
    for entity in result["entities"]:
        assert text[entity["start"]:entity["end"]] == entity["text"] and entity["type"] in ("LOC", "PER")
    short = predictor.tag(["john lives in new york ."])[0]
    assert len(short["words"]) == 6


@pytest.mark.parametrize("case, message", [
    ("not_a_model", "is not a model"),
    ("missing", "does not exist"),
    ("empty_file", "the file is empty"),
    ("question_on_classifier", "cannot do question answering"),
    ("too_long", "tokens, the model takes 32; the last"),
    ("no_mask", "has no [MASK]"),
    ("pair_on_tagger", "only a classifier takes pairs"),
    ("odd_pairs", "two by two"),
])
def test_mistakes_are_one_message_each(checkpoints, tmp_path, capsys, case, message):
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    args = {
        "not_a_model": [str(text_file), "hi"],
        "missing": [str(tmp_path / "nope.ckpt"), "hi"],
        "empty_file": [str(checkpoints["classification"]), "--file", str(empty)],
        "question_on_classifier": [str(checkpoints["classification"]), "--question", "who?", "--context", "john"],
        "too_long": [str(checkpoints["classification"]), "--no-truncation", " ".join(["cat"] * 40)],
        "no_mask": [str(checkpoints["pretraining"]), "the cat sat ."],
        "pair_on_tagger": [str(checkpoints["tagging"]), "--pair", "john", "lives"],
        "odd_pairs": [str(checkpoints["classification"]), "--pair", "john", "lives", "in"],
    }[case]
    assert predict_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_truncation_is_a_warning_that_says_what_was_cut(checkpoints, capsys):
    result = Predictor(checkpoints["classification"]).classify([" ".join(["cat"] * 25 + ["dog"] * 10)])[0]
    assert result["truncated"]["tokens"] == 5 and result["truncated"]["text"] == " ".join(["dog"] * 5)
    assert "37 tokens, the model takes 32; the last 5 were cut" in capsys.readouterr().err


@pytest.mark.parametrize("layers", ["second_to_last", "concat_last_4", "all"])
def test_a_tagger_on_other_layers_predicts_as_its_module(tmp_path, layers):
    torch.manual_seed(0)
    config = BertConfig(**{**TINY.to_dict(), "num_hidden_layers": 4})
    module = TokenClassificationModule(config, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(VOCAB),
                                       labels=["O", "B-LOC", "I-LOC"], layers=layers).eval()
    path = save_ckpt(module, tmp_path / "tagger.ckpt")
    predictor = Predictor(path)
    assert predictor.model.layers == layers
    result = predictor.tag(["john lives in new york ."])[0]
    ids = torch.tensor([[2] + [VOCAB.index(w) for w in ["john", "lives", "in", "new", "york", "."]] + [3]])
    with torch.no_grad():
        expected = module.model(ids, torch.zeros_like(ids), torch.ones_like(ids))[0, 1:-1].argmax(-1)
    assert [w["label"] for w in result["words"]] == [module.labels[i] for i in expected]


def test_question_answering_over_windows_agrees_with_evaluation(tmp_path, capsys):
    """A SQuAD JSON and a JSONL file, contexts longer than one window: the answers are those the
    evaluation's post-processing picks from the same logits, with offsets into the context."""
    from bert_exp.data.tasks.squad import SquadExample, make_features, postprocess
    from bert_exp.tasks import QuestionAnsweringModule

    torch.manual_seed(0)
    module = QuestionAnsweringModule(TINY, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(VOCAB)).eval()
    with torch.no_grad():
        module.model.qa_outputs.weight.normal_(0, 2)
    path = save_ckpt(module, tmp_path / "qa.ckpt")
    context = " ".join(["the cat sat on the mat , and the dog ran under the table ."] * 4)
    questions = ["where is the cat ?", "who ran ?"]
    squad = {"data": [{"paragraphs": [{"context": context, "qas": [{"id": f"q{i}", "question": q}
                                                                    for i, q in enumerate(questions)]}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps({"question": q, "context": context}) + "\n"
                                                for q in questions))
    args = ["--max-length", "24", "--doc-stride", "8"]
    assert predict_main([str(path), "--file", str(tmp_path / "dev.json"), *args]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert predict_main([str(path), "--file", str(tmp_path / "dev.jsonl"), *args]) == 0
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in records] == ["q0", "q1"]
    assert [(r["start"], r["end"]) for r in records] == [(r["start"], r["end"]) for r in again]

    predictor = Predictor(path, max_length=24, doc_stride=8)
    examples = [SquadExample(str(i), q, context, []) for i, q in enumerate(questions)]
    features = make_features(examples, predictor.tokenizer, 24, 8, 64, labels=False)
    assert len(features) > 2 * len(examples)  # really several windows each
    starts, ends = [], []
    with torch.no_grad():
        for f in features:
            ids = torch.tensor([f.input_ids])
            s, e = module.model(ids, torch.tensor([f.token_type_ids]), torch.ones_like(ids))
            starts.append(s[0].numpy())
            ends.append(e[0].numpy())
    expected, _ = postprocess(examples, features, starts, ends)
    for i, record in enumerate(records):
        assert record["answer"] == expected[str(i)] == context[record["start"]:record["end"]]
        assert record["answer"] and len(record["n_best"]) == 5


def test_a_squad_v2_run_answers_no_answer_with_its_null_odds(tmp_path, capsys):
    """A v2.0 run (run.json: data.version_2) answers "" where the null score beats the best span by more than
    its data.null_score_diff_threshold, shows null_odds either way, and agrees with the evaluation's v2.0
    post-processing of the same logits; --null-threshold sets another threshold."""
    from bert_exp.data.tasks.squad import SquadExample, make_features, postprocess
    from bert_exp.tasks import QuestionAnsweringModule

    torch.manual_seed(1)
    module = QuestionAnsweringModule(TINY, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(VOCAB)).eval()
    with torch.no_grad():
        module.model.qa_outputs.weight.normal_(0, 2)
    run_dir = tmp_path / "squad_v2_run"
    save_ckpt(module, run_dir / "checkpoints" / "last.ckpt")
    context = "the cat sat on the mat , and the dog ran under the table ."
    questions = ["where is the cat ?", "who ran ?", "is john big ?", "what is new york ?"]
    predictor = Predictor(run_dir, max_length=32)
    assert predictor.null_threshold is None  # no run.json: a v1.1 model, never "no answer"
    assert "null_odds" not in predictor.answer(questions[:1], [context])[0]
    examples = [SquadExample(str(i), q, context, []) for i, q in enumerate(questions)]
    features = make_features(examples, predictor.tokenizer, 32, 128, 64, labels=False)
    with torch.no_grad():
        logits = [module.model(torch.tensor([f.input_ids]), torch.tensor([f.token_type_ids]),
                               torch.ones(1, len(f.input_ids), dtype=torch.long)) for f in features]
    starts, ends = [s[0].numpy() for s, _ in logits], [e[0].numpy() for _, e in logits]
    _, odds = postprocess(examples, features, starts, ends, version_2=True)
    threshold = sorted(odds.values())[1] + 1e-4  # between the second and third: two answers, two "no answer"
    expected, _ = postprocess(examples, features, starts, ends, version_2=True, null_score_diff_threshold=threshold)
    (run_dir / "run.json").write_text(json.dumps({"config": {"data": {"version_2": True,
                                                                       "null_score_diff_threshold": threshold}}}))
    results = Predictor(run_dir, max_length=32).answer(questions, [context] * len(questions))
    assert [r["answer"] for r in results] == [expected[str(i)] for i in range(len(questions))]
    assert sorted(r["no_answer"] for r in results) == [False, False, True, True]
    assert [r["null_odds"] for r in results] == pytest.approx([odds[str(i)] for i in range(len(questions))], abs=1e-4)
    assert all(r["n_best"] for r in results)  # the spans it passed over are still shown
    # a run that tuned its threshold on held-out questions (val/null_threshold) answers at that one
    (run_dir / "run.json").write_text(json.dumps({"config": {"data": {"version_2": True,
                                                                       "null_score_diff_threshold": 1e9}},
                                                  "metrics": {"val/null_threshold": threshold}}))
    tuned = Predictor(run_dir, max_length=32)
    assert tuned.null_threshold == threshold
    assert [r["answer"] for r in tuned.answer(questions, [context] * 4)] == [r["answer"] for r in results]
    args = [str(run_dir), "--max-length", "32"]
    for q in questions:
        args += ["--question", q, "--context", context]
    assert predict_main([*args, "--null-threshold", "1e9"]) == 0
    assert not any(json.loads(line)["no_answer"] for line in capsys.readouterr().out.splitlines())
    # the windows the run trained and evaluated on are predict's, unless given
    (run_dir / "run.json").write_text(json.dumps({"config": {"data": {"max_seq_length": 24, "doc_stride": 8}}}))
    assert (Predictor(run_dir).qa_length, Predictor(run_dir).doc_stride) == (24, 8)
    given = Predictor(run_dir, max_length=32, doc_stride=16)
    assert (given.qa_length, given.doc_stride) == (32, 16)


def test_input_files_in_csv_are_read_as_the_data_sets_are(tmp_path):
    """predict's .tsv and .csv inputs go through the data sets' table reader (quoted fields, line numbers)."""
    import csv

    from bert_exp.tools.predict import PredictError, read_inputs

    rows = [("the cat, it sat .", 'a "dog" ran .'), ("two\nlines", "one")]
    path = tmp_path / "pairs.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    inputs = read_inputs(path)
    assert list(zip(inputs.texts, inputs.pairs)) == rows
    path.write_text(" , \n")
    with pytest.raises(PredictError, match=r"pairs.csv: no rows"):
        read_inputs(path)
    path.write_text("a,b\nc,d,e\n")
    with pytest.raises(PredictError, match=r"pairs.csv:2: expected 2 comma-separated columns \(a text, or a pair\), found 3"):
        read_inputs(path)
