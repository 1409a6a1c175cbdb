"""The v2.0 metric equals the official ``evaluate-v2.0.py``: a predictions file and its null_odds.json
(what a SQuAD 2.0 run writes) scored by ``bert_exp.metrics.squad.evaluate_v2`` give the numbers the official
script printed for the same three files (``golden/squad_v2_small*.json``; the official script, CodaLab bundle
0x6b567e1cf2e041ec80d7098f031c5c9e, was run on them with its defaults: ``--na-prob-thresh 1.0``). The files
hold what the script treats specially: several gold answers, articles and punctuation, partial overlap, an
unanswerable question answered, an answerable one left empty, and null odds above 1.0 on an answerable
question (the script counts it as a no-answer)."""

import json
from pathlib import Path

import pytest

from bert_exp.data.tasks.squad import read_squad
from bert_exp.metrics.squad import evaluate_v2, v2_summary

GOLDEN = Path(__file__).parent / "golden"


def test_our_v2_metric_equals_the_official_script_on_the_same_files():
    examples = read_squad(GOLDEN / "squad_v2_small.json")
    predictions = json.loads((GOLDEN / "squad_v2_small_predictions.json").read_text())
    null_odds = json.loads((GOLDEN / "squad_v2_small_null_odds.json").read_text())
    official = json.loads((GOLDEN / "squad_v2_small_official.json").read_text())
    ours = evaluate_v2(examples, predictions, null_odds)
    assert set(ours) == set(official)
    for key, value in official.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key


def test_the_last_line_of_a_v2_run():
    metrics = {"val/f1": 51.85, "val/exact_match": 44.44, "val/HasAns_f1": 53.33, "val/HasAns_exact": 40.0,
               "val/NoAns_f1": 50.0, "val/NoAns_exact": 50.0, "val/best_f1": 66.67, "val/best_f1_thresh": -2.0}
    line = v2_summary(metrics, 0.0)
    assert line.startswith("SQuAD 2.0 at null-score threshold 0: F1 51.85, EM 44.44 (HasAns F1 53.33, EM 40.00; "
                           "NoAns F1 50.00, EM 50.00); best F1 66.67 at threshold -2, tuned on these same questions")
    assert v2_summary({"val/f1": 80.0, "val/exact_match": 70.0}, 0.0) is None  # v1.1: no such line
