"""Entity-level precision/recall/F1 over BIO-tagged sequences, and word accuracy.

``scheme="conll"`` follows the CoNLL-2000/2003 ``conlleval`` script: a chunk starts at ``B-``, or at an
``I-`` that follows ``O`` or another type (so IOB1 and IOB2 both read correctly); an entity counts as
found only when type, first and last word all match. ``scheme="iob2"`` is strict: only ``B-X I-X*`` is
an entity, a stray ``I-`` is none.
"""

from __future__ import annotations

from collections import Counter

SCHEMES = ("conll", "iob2")


def _split(tag: str) -> tuple[str, str]:
    if tag == "O" or "-" not in tag:
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def entities(tags: list[str], scheme: str = "conll") -> set[tuple[str, int, int]]:
    """(type, first, last) of every entity in one sequence (``last`` inclusive)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {SCHEMES}")
    out, start, kind = set(), None, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, t = _split(tag)
        if scheme == "conll":
            begins = prefix in ("B", "S") or (prefix in ("I", "E") and (start is None or t != kind))
        else:
            begins = prefix == "B"
        continues = start is not None and prefix in ("I", "E") and t == kind and not begins
        if start is not None and not continues:
            out.add((kind, start, i - 1))
            start = None
        if begins:
            start, kind = i, t
    return out


def entity_scores(gold: list[list[str]], pred: list[list[str]], scheme: str = "conll") -> dict[str, float]:
    """``precision``, ``recall``, ``f1`` (micro, over all entities) and ``<type>/precision|recall|f1``."""
    if len(gold) != len(pred) or any(len(g) != len(p) for g, p in zip(gold, pred)):
        raise ValueError("gold and predicted sequences differ in number or length")
    found, true, correct = Counter(), Counter(), Counter()
    for g, p in zip(gold, pred):
        ge, pe = entities(g, scheme), entities(p, scheme)
        true.update(e[0] for e in ge)
        found.update(e[0] for e in pe)
        correct.update(e[0] for e in ge & pe)

    def prf(c: int, f: int, t: int) -> tuple[float, float, float]:
        precision = c / f if f else 0.0
        recall = c / t if t else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1

    scores = dict(zip(("precision", "recall", "f1"), prf(sum(correct.values()), sum(found.values()),
                                                         sum(true.values()))))
    for kind in sorted(set(true) | set(found)):
        for name, value in zip(("precision", "recall", "f1"), prf(correct[kind], found[kind], true[kind])):
            scores[f"{kind}/{name}"] = value
    return scores


def word_accuracy(gold: list[list[str]], pred: list[list[str]]) -> float:
    pairs = [(g, p) for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)]
    return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0
