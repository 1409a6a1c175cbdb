"""The rules verify_predict.py's transformers-side reference applies, on tiny hand-made inputs."""

import numpy as np
from verify_predict import (
    best_span,
    compare_answers,
    compare_classification,
    masked_sentences,
    max_context,
)


def test_max_context_gives_each_token_to_the_window_where_it_is_most_central():
    # tokens 0-5 in (0, 6), 3-8 in (3, 6); score min(left, right) + 0.01 x length: token 3 has 2.06 in the
    # first, 0.06 in the second; token 4 ties (1.06 each): the first window keeps it; token 5: 0.06, 2.06
    flags = max_context([(0, 6), (3, 6)])
    assert flags[0] == [True, True, True, True, True, False]
    assert flags[1] == [False, False, True, True, True, True]
    assert max_context([(0, 4)]) == [[True] * 4]


def test_best_span_keeps_to_the_rules():
    start = np.array([9.0, 2.0, 5.0, 0.0, 4.0])
    end = np.array([9.0, 0.0, 1.0, 6.0, 3.0])
    context = np.array([False, True, True, True, True])  # position 0 ([CLS]) is no answer
    assert best_span(start, end, context, context, 30) == (11.0, 2, 3)
    assert best_span(start, end, context, context, 1) == (7.0, 4, 4)  # one token at most
    no_start = context & (np.arange(5) != 2)  # 2 is not in its max-context window
    assert best_span(start, end, no_start, context, 30) == (8.0, 1, 3)  # (4, 3) would end before it starts
    assert best_span(start, end, np.zeros(5, bool), context, 30) is None


def test_comparisons_count_agreements():
    ours = [{"label": "A", "probabilities": {"A": 0.7, "B": 0.3}}, {"label": "B", "probabilities": {"A": 0.4, "B": 0.6}}]
    theirs = [[{"label": "A", "score": 0.70001}, {"label": "B", "score": 0.29999}],
              [{"label": "A", "score": 0.6}, {"label": "B", "score": 0.4}]]
    c = compare_classification(ours, theirs)
    assert (c["labels"], c["close"]) == (1, 1) and abs(c["max_diff"] - 0.2) < 1e-9
    answers = [{"id": "q1", "answer": "Paris"}, {"id": "q2", "answer": "1990"}]
    c = compare_answers(answers, ["Paris", "in 1990"], {"q1": "Paris", "q2": "1990"})
    assert (c["equal"], c["run"], c["differ"]) == (1, 2, [("q2", "1990", "in 1990")])


def test_masked_sentences_mask_one_word_each():
    out = masked_sentences(["The cat sat on the mat.", "I a", "Dogs bark loudly"], 5)
    assert len(out) == 2 and all(s.count("[MASK]") == 1 for s in out)
