import copy
import json
import random

import numpy as np
import pytest

from bert_exp.data.tasks.glue import DataFileError
from bert_exp.data.tasks.squad import SquadExample, SquadFeature, make_features, postprocess, read_squad
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.metrics.squad import evaluate_v1, evaluate_v2, f1_v1, normalize_answer
from bert_exp.resources import minilm_dir


@pytest.fixture(scope="module")
def tokenizer():
    return load_vocab_file(str(minilm_dir() / "vocab.txt"))


@pytest.fixture(scope="module")
def dev(data_dir):
    return read_squad(data_dir / "squad" / "dev-v1.1.json")


def test_dev_file_and_article_ranges(data_dir, dev):
    assert len(dev) == 10570 and dev[0].question == "Which NFL team represented the AFC at Super Bowl 50?"
    train = read_squad(data_dir / "squad" / "dev-v1.1.json", [0, 38])
    val = read_squad(data_dir / "squad" / "dev-v1.1.json", [38, None])
    assert len(train) + len(val) == 10570
    assert not {e.title for e in train} & {e.title for e in val}


def test_labelled_spans_map_back_to_the_answer(dev, tokenizer):
    features = make_features(dev, tokenizer)
    labelled = {}
    for f in features:
        if f.start_position:
            labelled.setdefault(f.example_index, []).append(f)
    assert len(labelled) == len(dev)  # every v1.1 answer fits in some window
    exact = inside_token = 0
    for index, feats in labelled.items():
        ex = dev[index]
        start, text = ex.answers[0]["answer_start"], ex.answers[0]["text"]
        for f in feats:
            lo, hi = f.offsets[f.start_position][0], f.offsets[f.end_position][1]
            if ex.context[lo:hi] == text:
                exact += 1
                continue
            # the answer starts or ends inside a WordPiece token: the span is the smallest cover
            inside_token += 1
            assert lo <= start and start + len(text) <= hi
            assert f.offsets[f.start_position][1] > start and f.offsets[f.end_position][0] < start + len(text)
    assert inside_token < 0.005 * (exact + inside_token), (exact, inside_token)


def test_windows_follow_doc_stride_and_query_length(tokenizer):
    context = " ".join(f"word{i}" for i in range(700))
    question = " ".join(["why"] * 100)
    ex = SquadExample("q", question, context, [{"text": "word650", "answer_start": context.index("word650")}])
    features = make_features([ex], tokenizer, max_seq_length=384, doc_stride=128, max_query_length=64)
    assert all(f.input_ids[1:65] == [tokenizer.token_to_id("why")] * 64 for f in features)  # query cut to 64
    starts = [next(o for o in f.offsets if o is not None)[0] for f in features]
    n_tokens = len(tokenizer.encode(context, add_special_tokens=False).ids)
    doc_tokens = [len([o for o in f.offsets if o is not None]) for f in features]
    assert all(n <= 384 - 64 - 3 for n in doc_tokens) and all(len(f.input_ids) <= 384 for f in features)
    token_starts = [tokenizer.encode(context[:s], add_special_tokens=False).ids.__len__() for s in starts]
    assert all(b - a == 128 for a, b in zip(token_starts, token_starts[1:]))
    assert token_starts[-1] + doc_tokens[-1] == n_tokens
    # each context token is the "max context" of exactly one window
    coverage = {}
    for f, t0 in zip(features, token_starts):
        for k, (o, best) in enumerate(zip([o for o in f.offsets if o is not None],
                                          [m for o, m in zip(f.offsets, f.max_context) if o is not None])):
            coverage.setdefault(t0 + k, []).append(best)
    assert all(sum(v) == 1 for v in coverage.values())
    labelled = [f for f in features if f.start_position]
    assert labelled and all(f.start_position == 0 for f in features if f not in labelled)


def feature_for(context, answer_span_logits, length=12):
    """A hand-made feature: [CLS] q [SEP] then one token per context word, then [SEP]."""
    words, offsets, pos = context.split(), [], 0
    for w in words:
        start = context.index(w, pos)
        offsets.append((start, start + len(w)))
        pos = start + len(w)
    prefix = 3
    offs = [None] * prefix + offsets + [None]
    n = len(offs)
    f = SquadFeature(0, list(range(n)), [0] * n, offs, [o is not None for o in offs])
    start, end = np.full(n, -5.0), np.full(n, -5.0)
    for (s, e), score in answer_span_logits:
        start[s + prefix] = max(start[s + prefix], score)
        end[e + prefix] = max(end[e + prefix], score)
    return f, start, end


def test_postprocess_hand_worked():
    context = "The  Eiffel Tower is in Paris , France ."
    ex = SquadExample("q1", "Where?", context, [{"text": "Paris", "answer_start": context.index("Paris")}])
    f, start, end = feature_for(context, [((5, 5), 3.0), ((5, 7), 2.0)])
    preds, _ = postprocess([ex], [f], [start], [end])
    assert preds == {"q1": "Paris"}
    # the best span maps back to the original characters, inner spacing included
    f, start, end = feature_for(context, [((0, 2), 4.0)])
    assert postprocess([ex], [f], [start], [end])[0]["q1"] == "The  Eiffel Tower"
    # an end before the start, or a span over max_answer_length tokens, is never chosen
    start2, end2 = start.copy(), end.copy()
    start2[3 + 6], end2[3 + 1] = 9.0, 9.0
    assert postprocess([ex], [f], [start2], [end2], max_answer_length=30)[0]["q1"] != ""
    assert postprocess([ex], [f], [start], [end], max_answer_length=2)[0]["q1"] != "The  Eiffel Tower"
    # a start outside the context ([CLS], question) is never chosen
    start3 = start.copy()
    start3[1] = 50.0
    assert postprocess([ex], [f], [start3], [end])[0]["q1"] == "The  Eiffel Tower"


def test_v2_null_threshold():
    context = "Rain falls in Spain ."
    ex = SquadExample("q", "?", context, [])
    f, start, end = feature_for(context, [((3, 3), 1.0)])
    start[0], end[0] = 2.0, 2.0  # null score 4.0 vs best span 2.0: odds 2.0
    preds, odds = postprocess([ex], [f], [start], [end], version_2=True, null_score_diff_threshold=0.0)
    assert preds == {"q": ""} and odds["q"] == pytest.approx(2.0)
    preds, _ = postprocess([ex], [f], [start], [end], version_2=True, null_score_diff_threshold=2.5)
    assert preds == {"q": "Spain"}


def test_official_normalisation_and_f1():
    assert normalize_answer("The  Cat's hat!") == "cats hat"
    assert normalize_answer("an apple, a pear and the plum") == "apple pear and plum"
    assert f1_v1("the big cat", "a big dog") == pytest.approx(0.5)
    assert f1_v1("big big cat", "big cat") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    exs = [SquadExample("a", "", "", [{"text": "Paris"}, {"text": "Paris, France"}]),
           SquadExample("b", "", "", [{"text": "1990"}]),
           SquadExample("c", "", "", [{"text": "blue whale"}])]
    result = evaluate_v1(exs, {"a": "paris france", "b": "in 1990", "c": "blue whale"})  # "b"'s F1 = 2/3
    assert result["exact_match"] == pytest.approx(100 * 2 / 3)
    assert result["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 3)
    assert evaluate_v1(exs, {"a": "Paris"})["exact_match"] == pytest.approx(100 / 3)  # unanswered count 0


def test_official_v2_breakdown_and_best_threshold():
    exs = [SquadExample("h1", "", "", [{"text": "red"}]), SquadExample("h2", "", "", [{"text": "green"}]),
           SquadExample("n1", "", "", [], True), SquadExample("n2", "", "", [], True)]
    preds = {"h1": "red", "h2": "blue", "n1": "", "n2": "yellow"}
    result = evaluate_v2(exs, preds)
    assert result["exact"] == 50.0 and result["HasAns_exact"] == 50.0 and result["NoAns_exact"] == 50.0
    assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
    odds = {"h1": 0.1, "h2": 0.5, "n1": 0.9, "n2": 0.8}
    result = evaluate_v2(exs, preds, odds)
    # brute force over thresholds: predict no-answer where odds > t
    def score(t):
        return 100 * sum((1.0 if not ex.answers else 0.0) if odds[ex.qid] > t else
                         float((preds[ex.qid] or "") == (ex.answers[0]["text"] if ex.answers else ""))
                         for ex in exs) / 4
    best = max(score(t) for t in [-1.0, *odds.values()])
    assert result["best_exact"] == pytest.approx(best) == pytest.approx(75.0)
    assert score(result["best_exact_thresh"]) == pytest.approx(best)


def make_v2_file(dev_path, out_path, seed=0):
    """SQuAD v2.0-style data from dev-v1.1: some questions are moved to another article's paragraph
    and marked is_impossible (their answers are not in that context)."""
    raw = json.loads(dev_path.read_text())
    rng = random.Random(seed)
    data = copy.deepcopy(raw["data"][:3])
    for a, article in enumerate(data):
        donor = raw["data"][10 + a]["paragraphs"][0]["qas"][:5]
        for q in donor:
            article["paragraphs"][0]["qas"].append(
                {"id": q["id"] + "_impossible", "question": q["question"], "answers": [], "is_impossible": True,
                 "plausible_answers": q["answers"][:1]})
        rng.shuffle(article["paragraphs"][0]["qas"])
    out_path.write_text(json.dumps({"version": "v2.0", "data": data}))
    return out_path


def test_v2_features_and_evaluation(data_dir, tmp_path, tokenizer):
    path = make_v2_file(data_dir / "squad" / "dev-v1.1.json", tmp_path / "dev-v2.json")
    examples = read_squad(path)
    impossible = [e for e in examples if e.is_impossible]
    assert len(impossible) == 15 and all(not e.answers for e in impossible)
    features = make_features(examples, tokenizer)
    for f in features:
        if examples[f.example_index].is_impossible:
            assert (f.start_position, f.end_position) == (0, 0)  # [CLS]
    # an oracle that puts its logits on the gold span (or on [CLS]) scores 100
    starts, ends = [], []
    for f in features:
        s, e = np.full(len(f.input_ids), -10.0), np.full(len(f.input_ids), -10.0)
        s[f.start_position] = e[f.end_position] = 10.0 if (f.start_position or examples[f.example_index].is_impossible) else -10.0
        s[0] = e[0] = 10.0 if examples[f.example_index].is_impossible else -20.0
        starts.append(s)
        ends.append(e)
    preds, odds = postprocess(examples, features, starts, ends, version_2=True)
    result = evaluate_v2(examples, preds, odds)
    assert result["NoAns_exact"] == 100.0 and result["HasAns_exact"] > 95.0
    assert all(preds[e.qid] == "" for e in impossible) and all(odds[e.qid] > 0 for e in impossible)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["data"][0]["paragraphs"][0].pop("context"), r"data\[0\].paragraphs\[0\]: missing or empty 'context'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].pop("question"), r"data\[0\].paragraphs\[0\].qas\[1\]: missing 'question'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=3),
     r"qas\[0\].answers\[0\] \(question id \w+\): answer_start 3 does not point at"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(answers=[]), r"no answers and not is_impossible"),
    (lambda d: d.pop("data"), r'expected \{"data": \[...\]\}'),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=-5),
     r"qas\[0\].answers\[0\] \(question id \w+\): answer_start -5 is negative"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0].update(answer_start=True),
     r"qas\[0\].answers\[0\]: needs 'text' and an integer 'answer_start'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0].update(is_impossible="false"),
     r"qas\[0\]: 'is_impossible' is 'false', not true or false"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][0:2] and [d["data"][0]["paragraphs"][0]["qas"][0].update(id=1),
                                                             d["data"][0]["paragraphs"][0]["qas"][1].update(id="1")],
     r"qas\[1\]: duplicate id '1'"),
])
def test_malformed_squad_is_a_clear_error(data_dir, tmp_path, mutate, message):
    raw = json.loads((data_dir / "squad" / "dev-v1.1.json").read_text())
    raw["data"] = raw["data"][:1]
    mutate(raw)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DataFileError, match=message):
        read_squad(path)
    path.write_text("{ not json")
    with pytest.raises(DataFileError, match=r"bad.json:1: not valid JSON"):
        read_squad(path)
