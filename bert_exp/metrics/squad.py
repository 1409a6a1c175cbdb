"""SQuAD exact match and F1, following the official evaluation scripts (v1.1 and v2.0) exactly.

Normalisation: lower-case, remove punctuation, remove the articles a/an/the, collapse whitespace. The
score of a question is the maximum over its gold answers. v1.1: averaged over every question of the
data set (a question without a prediction scores 0). v2.0: an unanswerable question's gold answer is
the empty string; results are broken down into HasAns and NoAns; with ``na_probs`` (our null odds),
the best threshold on the evaluated set is searched as the official script does.
"""

from __future__ import annotations

import collections
import itertools
import re
import string

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def _overlap_f1(pred: list[str], truth: list[str]) -> float:
    common = collections.Counter(pred) & collections.Counter(truth)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def f1_v1(prediction: str, gold: str) -> float:
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_v2(prediction: str, gold: str) -> float:
    pred, truth = _tokens(prediction), _tokens(gold)
    if not pred or not truth:  # either is no-answer: F1 is 1 if they agree, else 0
        return float(pred == truth)
    return _overlap_f1(pred, truth)


def evaluate_v1(examples, predictions: dict[str, str]) -> dict[str, float]:
    """``examples``: objects with ``qid`` and ``answers`` ([{"text": ...}]). Returns exact_match, f1 (0-100)."""
    em = f1 = 0.0
    for ex in examples:
        if ex.qid not in predictions:
            continue
        golds = [a["text"] for a in ex.answers]
        em += max(exact_match(predictions[ex.qid], g) for g in golds)
        f1 += max(f1_v1(predictions[ex.qid], g) for g in golds)
    total = len(examples)
    return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total, "total": total}


def _apply_no_answer_threshold(scores, na_probs, has_answer, threshold):
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else s for qid, s in scores.items()}


def _best_threshold(predictions, scores, na_probs, has_answer):
    score = best = sum(1 for qid in has_answer if not has_answer[qid])
    best_threshold = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            diff = scores[qid]
        else:
            diff = -1 if predictions[qid] else 0
        score += diff
        if score > best:
            best, best_threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), best_threshold


def _raw_scores(examples, predictions):
    """Per answered question: max exact match and F1 over the gold answers ("" when unanswerable)."""
    exact, f1 = {}, {}
    for ex in examples:
        if ex.qid not in predictions:
            continue
        golds = [a["text"] for a in ex.answers if normalize_answer(a["text"])] or [""]
        exact[ex.qid] = max(exact_match(predictions[ex.qid], g) for g in golds)
        f1[ex.qid] = max(f1_v2(predictions[ex.qid], g) for g in golds)
    return exact, f1


def _has_answer(examples) -> dict[str, bool]:
    """Per question id: whether it has a non-empty gold answer (after normalisation)."""
    return {ex.qid: bool([a for a in ex.answers if normalize_answer(a["text"])]) for ex in examples}


def evaluate_v2(examples, predictions: dict[str, str], na_probs: dict[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
    has_answer = _has_answer(examples)
    exact_raw, f1_raw = _raw_scores(examples, predictions)
    probs = na_probs if na_probs is not None else {qid: 0.0 for qid in has_answer}
    exact = _apply_no_answer_threshold(exact_raw, probs, has_answer, na_prob_thresh)
    f1 = _apply_no_answer_threshold(f1_raw, probs, has_answer, na_prob_thresh)

    def summary(qids):
        n = len(qids)
        return {"exact": 100.0 * sum(exact.get(q, 0) for q in qids) / n,
                "f1": 100.0 * sum(f1.get(q, 0) for q in qids) / n, "total": n}

    result = summary(list(has_answer))
    for name, flag in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, h in has_answer.items() if h is flag]
        if qids:
            result.update({f"{name}_{k}": v for k, v in summary(qids).items()})
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(predictions, exact_raw, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(predictions, f1_raw, na_probs, has_answer)
    return result


def tune_null_threshold(examples, span_predictions: dict[str, str], null_odds: dict[str, float]) -> tuple[float, float]:
    """The null-score threshold that maximises v2.0 F1 on ``examples`` (held-out questions, never the
    evaluated ones), and that F1. ``span_predictions`` are the best non-null spans (no threshold applied).
    Where abstaining on every question scores best, the threshold lies below every null odds."""
    has_answer = _has_answer(examples)
    _, f1_raw = _raw_scores(examples, span_predictions)
    best, threshold = _best_threshold(span_predictions, f1_raw, null_odds, has_answer)
    abstain_all = 100.0 * sum(not h for h in has_answer.values()) / len(f1_raw)
    if best <= abstain_all:  # no threshold beats abstaining everywhere (the official search then says 0.0)
        threshold = min(null_odds[qid] for qid in f1_raw) - 1.0
    return threshold, best


def answerability(examples, span_predictions: dict[str, str], null_odds: dict[str, float]) -> dict[str, float]:
    """What limits a SQuAD 2.0 model, apart: ``HasAns_span_f1``, the answerable questions' F1 had each been
    answered with its best span (how well it finds answers), and ``NoAns_auroc``, how well its null odds
    rank the unanswerable questions above the answerable ones (ROC AUC: 0.5 is chance, 1.0 perfect),
    from the ranks of the null odds (the Mann-Whitney form: ties count half). ``span_predictions``: the
    best non-null spans, no threshold applied."""
    has_answer = _has_answer(examples)
    _, f1_raw = _raw_scores(examples, span_predictions)
    answerable = [qid for qid, h in has_answer.items() if h]
    unanswerable = len(has_answer) - len(answerable)
    result = {}
    if answerable:
        result["HasAns_span_f1"] = 100.0 * sum(f1_raw[qid] for qid in answerable) / len(answerable)
    if answerable and unanswerable:
        ranked = sorted((null_odds[qid], not h) for qid, h in has_answer.items())
        rank_sum, start = 0.0, 0  # the unanswerable questions' ranks, a tie's ranks averaged
        for _, tied in itertools.groupby(ranked, key=lambda pair: pair[0]):
            flags = [no_answer for _, no_answer in tied]
            rank_sum += sum(flags) * (start + 1 + start + len(flags)) / 2
            start += len(flags)
        pairs = unanswerable * len(answerable)
        result["NoAns_auroc"] = (rank_sum - unanswerable * (unanswerable + 1) / 2) / pairs
    return result


def v2_summary(metrics: dict, threshold: float) -> str | None:
    """The line a SQuAD 2.0 run ends with: F1 and EM at the configured null-score threshold, overall and
    for the answerable (HasAns) and unanswerable (NoAns) questions, then the official script's best F1
    and its threshold, which are tuned on the same questions (so not the headline)."""
    m = {key.removeprefix("val/"): value for key, value in metrics.items()}
    if not all(f"{part}_f1" in m for part in ("HasAns", "NoAns")):
        return None
    where = f"null-score threshold {threshold:g}"
    if "null_threshold" in m:  # tuned on held-out training questions (data.threshold_file)
        where = (f"null-score threshold {m['null_threshold']:.3g} (tuned on held-out training questions, "
                 f"F1 {m['threshold_f1']:.2f} there)")
    line = (f"SQuAD 2.0 at {where}: F1 {m['f1']:.2f}, EM {m['exact_match']:.2f} "
            f"(HasAns F1 {m['HasAns_f1']:.2f}, EM {m['HasAns_exact']:.2f}; NoAns F1 {m['NoAns_f1']:.2f}, "
            f"EM {m['NoAns_exact']:.2f})")
    if "best_f1" in m:
        line += (f"; best F1 {m['best_f1']:.2f} at threshold {m['best_f1_thresh']:.3g}, tuned on these same "
                 "questions (the official script's best_f1)")
    if "HasAns_span_f1" in m and "NoAns_auroc" in m:
        line += (f". Answering every answerable question with its best span: HasAns F1 {m['HasAns_span_f1']:.2f}; "
                 f"the null odds rank unanswerable above answerable with ROC AUC {m['NoAns_auroc']:.3f} (0.5: chance)")
    return line
