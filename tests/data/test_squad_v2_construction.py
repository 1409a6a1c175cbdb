"""data=squad_v2_local: a SQuAD 2.0 training set built as SQuAD 2.0's was (v1.1's answerable questions plus
unanswerable ones on the same articles), the evaluated and threshold-tuning articles never in training, the
null-score threshold tuned on held-out questions; selections by title, and their mistakes."""

import json

import numpy as np
import pytest
from hydra.utils import instantiate

from bert_exp.data.tasks.squad import (AnswerSelection, DataFileError, SquadDataModule, SquadEvaluator, SquadExample,
                                 SquadFeature, SquadSelection, check_no_shared_contexts, read_selections, read_squad)
from bert_exp.metrics.squad import answerability, tune_null_threshold, v2_summary
from bert_exp.resources import minilm_dir
from helpers import compose_config

EVALUATED = {"Imperialism", "Warsaw", "French_and_Indian_War", "Force"}
TUNING = {"Scottish_Parliament", "Islamism"}


def squad_v2_local(*overrides):
    cfg = compose_config(["+experiment=squad_v2_minilm_local", f"data.vocab_file={minilm_dir() / 'vocab.txt'}",
                          "data.download=false", *overrides])
    return instantiate(cfg.data)


@pytest.fixture(scope="module")
def datamodule(data_dir):
    return squad_v2_local()


def test_the_training_set_counts_and_sources(datamodule, data_dir):
    train = datamodule.training_examples()
    answerable = [e for e in train if not e.is_impossible]
    unanswerable = [e for e in train if e.is_impossible]
    assert (len(answerable), len(unanswerable)) == (9369, 1987)
    v1_ids = {e.qid for e in read_squad(data_dir / "squad" / "dev-v1.1.json")}
    assert {e.qid for e in answerable} <= v1_ids  # answerable: v1.1's questions; unanswerable: the half's
    half = {e.qid: e for e in read_squad(data_dir / "squad" / "dev-v2.0-half.json")}
    assert all(e.qid in half and half[e.qid].is_impossible for e in unanswerable)
    # 44 v1.1 articles less the 2 held out for the threshold; the half's 12 training articles less those 2
    assert len({e.title for e in answerable}) == 42 and len({e.title for e in unanswerable}) == 10


def test_without_the_held_out_articles_it_is_the_whole_construction(data_dir):
    dm = squad_v2_local("data.threshold_file=null")
    train = dm.training_examples()
    assert (sum(not e.is_impossible for e in train), sum(e.is_impossible for e in train)) == (9758, 2342)
    assert not {e.title for e in train} & EVALUATED


def test_no_evaluated_or_tuning_text_in_training(datamodule):
    datamodule.setup("fit")
    evaluator = datamodule.evaluator
    train = datamodule.training_examples()
    assert {e.title for e in evaluator.examples} == EVALUATED and {e.title for e in evaluator.tune_examples} == TUNING
    assert (len(evaluator.examples), sum(e.is_impossible for e in evaluator.examples)) == (1629, 826)
    assert (len(evaluator.tune_examples), sum(e.is_impossible for e in evaluator.tune_examples)) == (741, 355)
    held_out = {e.context for e in evaluator.examples + evaluator.tune_examples}
    train_contexts = {e.context for e in train}
    assert not train_contexts & held_out
    # nor a sentence of them: every training paragraph's sentences against the held-out paragraphs' text
    held_text = "\n".join(held_out)
    long_sentences = {s.strip() for c in train_contexts for s in c.split(". ") if len(s.split()) >= 12}
    assert not [s for s in long_sentences if s in held_text]
    # the validation pass scores the evaluated windows, then the tuning ones
    assert len(datamodule.val_dataset) == len(evaluator.features) + len(evaluator.tune_features)
    assert len(evaluator.scored_features) == len(datamodule.val_dataset)


def test_titles_select_the_same_questions_as_positions(data_dir):
    half = data_dir / "squad" / "dev-v2.0-half.json"
    by_position = read_squad(half, [12, None])
    by_title = SquadSelection(str(half), titles=tuple(EVALUATED)).read()
    assert [e.qid for e in by_title] == [e.qid for e in by_position]
    assert SquadSelection(str(half), exclude_titles=tuple(EVALUATED)).read() == read_squad(half, [0, 12])
    only = SquadSelection(str(half), titles=("Warsaw",), questions="answerable").read()
    assert len(only) == 242 and not any(e.is_impossible for e in only)


def test_a_shared_paragraph_stops_the_run(data_dir, tmp_path):
    """Another title over the same paragraph (a renamed article) is caught by its text."""
    raw = json.loads((data_dir / "squad" / "dev-v2.0-half.json").read_text())
    warsaw = next(a for a in raw["data"] if a["title"] == "Warsaw")
    renamed = {"title": "Warszawa", "paragraphs": [{"context": warsaw["paragraphs"][0]["context"], "qas": [
        {"id": "renamed-1", "question": "Where?", "answers": [], "is_impossible": True}]}]}
    path = tmp_path / "extra.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [renamed]}))
    parts = [SquadSelection(str(path))]
    val = [SquadSelection(str(data_dir / "squad" / "dev-v2.0-half.json"), titles=("Warsaw",))]
    with pytest.raises(DataFileError, match="share paragraphs with the evaluated questions.*Warszawa"):
        check_no_shared_contexts(read_selections(parts), read_selections(val), "evaluated")


@pytest.mark.parametrize("selection, message", [
    ({"file": "{half}", "titles": ["Warsw"]}, r"dev-v2.0-half.json: no article titled 'Warsw'"),
    ({"file": "{half}", "questions": "impossible"}, r"data.val_file.questions: 'impossible' is not one of"),
    ({"file": "{half}", "title": ["Warsaw"]}, r"data.val_file: unknown keys \['title'\]"),
    ({"path": "{half}"}, r"data.val_file: expected a path or a mapping with 'file'"),
])
def test_a_wrong_selection_is_one_clear_error(data_dir, selection, message):
    half = str(data_dir / "squad" / "dev-v2.0-half.json")
    selection = {k: (v.format(half=half) if isinstance(v, str) else v) for k, v in selection.items()}
    with pytest.raises(DataFileError, match=message):
        SquadDataModule([{"file": half}], selection, version_2=True, vocab_file=str(minilm_dir() / "vocab.txt"),
                        download=False).setup("validate")


def test_the_same_question_from_two_files_is_refused(data_dir):
    v1 = str(data_dir / "squad" / "dev-v1.1.json")
    with pytest.raises(DataFileError, match="question id .* is also in"):
        read_selections([SquadSelection(v1, titles=("Warsaw",)), SquadSelection(v1, titles=("Warsaw",))])


def _question(qid, answerable):
    return SquadExample(qid, "q", "the cat sat", [{"text": "cat", "answer_start": 4}] if answerable else [],
                        not answerable)


def test_the_tuned_threshold_maximises_f1_on_the_held_out_questions():
    examples = [_question("a", True), _question("b", True), _question("c", False), _question("d", False)]
    spans = {"a": "cat", "b": "sat", "c": "cat", "d": "cat"}  # b answered wrong
    odds = {"a": -3.0, "b": -1.0, "c": 0.5, "d": 2.0}
    threshold, f1 = tune_null_threshold(examples, spans, odds)
    assert threshold == -3.0 and f1 == 75.0  # answer a only: a right, b, c, d abstain (b scores 0)
    # where abstaining everywhere is best, the threshold abstains everywhere (not the official 0.0)
    threshold, f1 = tune_null_threshold(examples[2:], {"c": "cat", "d": "cat"}, {"c": -1.0, "d": 1.0})
    assert threshold < -1.0 and f1 == 100.0


def test_the_evaluator_answers_at_the_tuned_threshold():
    """Two windows evaluated, two tuning: the threshold comes from the tuning questions alone."""
    def feature(index):
        return SquadFeature(index, [101, 7, 102, 1, 2, 3, 102], [0, 0, 0, 1, 1, 1, 1],
                            [None, None, None, (0, 3), (4, 7), (8, 11), None], [False] * 3 + [True] * 3 + [False])

    def logits(null, span):  # the [CLS] score against the best span "cat" (token 4)
        start, end = np.full(7, -10.0), np.full(7, -10.0)
        start[0] = end[0] = null / 2
        start[4] = end[4] = span / 2
        return start, end

    evaluator = SquadEvaluator(AnswerSelection(version_2=True, null_score_diff_threshold=0.0),
                               [_question("e1", True), _question("e2", False)], [feature(0), feature(1)],
                               [_question("t1", True), _question("t2", False)], [feature(0), feature(1)])
    # evaluated: e1 null odds +1 (abstains at the fixed 0), e2 +5; tuning: t1 +2, t2 +6 -> tuned threshold 2
    pairs = [logits(1, 0), logits(5, 0), logits(2, 0), logits(6, 0)]
    predictions, null_odds, metrics = evaluator.evaluate([p[0] for p in pairs], [p[1] for p in pairs])
    assert metrics["null_threshold"] == pytest.approx(2.0) and metrics["threshold_f1"] == 100.0
    assert predictions == {"e1": "cat", "e2": ""} and metrics["f1"] == 100.0
    assert metrics["HasAns_span_f1"] == 100.0 and metrics["NoAns_auroc"] == 1.0  # e2's odds above e1's
    fixed, _ = evaluator.answers([p[0] for p in pairs[:2]], [p[1] for p in pairs[:2]])
    assert fixed == {"e1": "", "e2": ""}  # at the configured threshold 0 it would have abstained on e1


def test_a_limited_training_set_draws_from_every_selection():
    dm = squad_v2_local("+data.limit_train_examples=600")
    train = dm.training_examples()
    assert len(train) == 600
    assert abs(sum(e.is_impossible for e in train) - 600 * 1987 / 11356) <= 1  # the unanswerable share kept (105)


def test_answerability_separates_finding_answers_from_knowing_when_to_abstain():
    examples = [_question("a", True), _question("b", True), _question("c", False), _question("d", False)]
    spans = {"a": "cat", "b": "sat", "c": "cat", "d": "cat"}  # b's best span is wrong
    # the null odds rank d above both answerable questions, c above b but below a: 3 of 4 pairs right
    result = answerability(examples, spans, {"a": 1.0, "b": -2.0, "c": 0.0, "d": 3.0})
    assert result == {"HasAns_span_f1": 50.0, "NoAns_auroc": 0.75}
    assert answerability(examples, spans, {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0})["NoAns_auroc"] == 0.5  # ties
    assert answerability(examples, spans, {"a": -1e9, "b": -5.0, "c": 2.0, "d": 1e9})["NoAns_auroc"] == 1.0
    assert answerability(examples[:2], spans, {"a": 1.0, "b": 2.0}) == {"HasAns_span_f1": 50.0}  # no AUC without both


def test_the_summary_line_names_what_limits_the_model():
    metrics = {"val/f1": 52.85, "val/exact_match": 50.95, "val/HasAns_f1": 33.73, "val/HasAns_exact": 29.89,
               "val/NoAns_f1": 71.43, "val/NoAns_exact": 71.43, "val/HasAns_span_f1": 81.1, "val/NoAns_auroc": 0.636}
    line = v2_summary(metrics, 0.0)
    assert line.endswith("Answering every answerable question with its best span: HasAns F1 81.10; the null odds "
                         "rank unanswerable above answerable with ROC AUC 0.636 (0.5: chance)")
