"""``python tests/e2e/verify_predict.py --pretrain RUN --cola RUN --squad RUN [--n 200]``: predict against
transformers on trained runs, on real inputs, and the throughput of both.

Each run is exported (``python -m bert_exp.export RUN OUT``); our ``Predictor`` and transformers read the
same exported directory:

* fill-mask (a pre-training run): ``--n`` CoLA out-of-domain dev sentences with one word replaced by
  [MASK], against the ``fill-mask`` pipeline: the top-1 token, and the top-k scores within 1e-4;
* classification (a CoLA run): ``--n`` CoLA in-domain dev sentences, against ``text-classification``:
  the label, and every probability within 1e-4;
* question answering (a SQuAD run): the first ``--n`` questions of the run's ``predictions.json`` (its
  validation articles). transformers 5 has no question-answering pipeline: the reference is
  ``BertForQuestionAnswering`` with ``BertTokenizerFast`` (windows from its overflowing tokens, the same
  stride), the best span by hand under the original rule (in the context, the start in its max-context
  window, at most ``max_answer_length`` tokens, the largest start + end logit over every candidate); and
  our answers against the ones the run wrote to ``predictions.json``.

Throughput: the same inputs, the same batch size, fp32 on the CPU, 3 interleaved rounds (ours, theirs,
ours, ...), medians. Prints a Markdown table. Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bert_exp import Predictor

DATA = Path(os.environ.get("BERT_EXP_DATA", "data"))
TOL = 1e-4


# -- inputs ---------------------------------------------------------------------------------------

def cola_sentences(path: Path) -> list[str]:
    return [line.split("\t")[3] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def masked_sentences(sentences: list[str], n: int, seed: int = 0) -> list[str]:
    """One word (letters only, at least 3 of them) of each sentence replaced by [MASK], chosen at random."""
    rng, out = random.Random(seed), []
    for sentence in sentences:
        words = sentence.split(" ")
        candidates = [i for i, w in enumerate(words) if w.isalpha() and len(w) >= 3]
        if not candidates:
            continue
        i = rng.choice(candidates)
        out.append(" ".join([*words[:i], "[MASK]", *words[i + 1:]]))
        if len(out) == n:
            break
    return out


def squad_questions(squad_json: Path, ids: list[str]) -> list[tuple[str, str, str]]:
    """(id, question, context) of these question ids, in their order."""
    wanted, found = set(ids), {}
    for article in json.loads(squad_json.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["id"] in wanted:
                    found[qa["id"]] = (qa["id"], qa["question"], paragraph["context"])
    return [found[i] for i in ids]


# -- comparisons ----------------------------------------------------------------------------------

def compare_fill_mask(ours: list[dict], theirs: list) -> dict:
    """Per text (one [MASK] each): the top-1 token id equal, the top-k ids equal, the top-k scores close."""
    top1 = topk = close = 0
    worst = 0.0
    for result, ref in zip(ours, theirs, strict=True):
        ref = ref[0] if ref and isinstance(ref[0], list) else ref
        mine = result["masks"][0]["predictions"]
        top1 += mine[0]["token_id"] == ref[0]["token"]
        topk += [p["token_id"] for p in mine] == [r["token"] for r in ref]
        diff = max(abs(p["score"] - r["score"]) for p, r in zip(mine, ref, strict=True))
        close += diff <= TOL
        worst = max(worst, diff)
    return {"n": len(ours), "top1": top1, "topk": topk, "close": close, "max_diff": worst}


def compare_classification(ours: list[dict], theirs: list[list[dict]]) -> dict:
    """Per text: the label equal, every label's probability close."""
    labels = close = 0
    worst = 0.0
    for result, ref in zip(ours, theirs, strict=True):
        ref = {r["label"]: r["score"] for r in ref}
        labels += result["label"] == max(ref, key=ref.get)
        diff = max(abs(p - ref[label]) for label, p in result["probabilities"].items())
        close += diff <= TOL
        worst = max(worst, diff)
    return {"n": len(ours), "labels": labels, "close": close, "max_diff": worst}


def compare_answers(ours: list[dict], theirs: list[str], run_predictions: dict[str, str]) -> dict:
    """Per question: our answer text equal to the reference's, and to the run's predictions.json."""
    equal = sum(r["answer"] == t for r, t in zip(ours, theirs, strict=True))
    run = sum(r["answer"] == run_predictions[r["id"]] for r in ours)
    return {"n": len(ours), "equal": equal, "run": run,
            "differ": [(r["id"], r["answer"], t) for r, t in zip(ours, theirs) if r["answer"] != t][:5]}


# -- transformers' side of question answering ------------------------------------------------------

def max_context(windows: list[tuple[int, int]]) -> list[list[bool]]:
    """For each window (start, length) and each of its tokens: is this the window where the token has the
    most context (min of left and right context + 0.01 x length; the first window on ties)?"""
    out = []
    for start, length in windows:
        flags = []
        for pos in range(start, start + length):
            best, best_score = None, None
            for i, (s, n) in enumerate(windows):
                if s <= pos < s + n:
                    score = min(pos - s, s + n - 1 - pos) + 0.01 * n
                    if best_score is None or score > best_score:
                        best, best_score = i, score
            flags.append(windows[best] == (start, length))
        out.append(flags)
    return out


def best_span(start: np.ndarray, end: np.ndarray, starts_ok: np.ndarray, ends_ok: np.ndarray,
              max_answer_length: int) -> tuple[float, int, int] | None:
    """The largest start + end logit over every (s, e): s allowed, e allowed, s <= e < s + max_answer_length."""
    n = len(start)
    scores = start[:, None] + end[None, :]
    s_idx, e_idx = np.indices((n, n))
    valid = starts_ok[:, None] & ends_ok[None, :] & (e_idx >= s_idx) & (e_idx - s_idx < max_answer_length)
    if not valid.any():
        return None
    scores = np.where(valid, scores, -np.inf)
    s, e = np.unravel_index(int(scores.argmax()), scores.shape)
    return float(scores[s, e]), int(s), int(e)


class TransformersQA:
    """BertForQuestionAnswering + BertTokenizerFast: windows from the tokenizer's overflowing tokens (an
    overlap of ``max_doc - doc_stride`` tokens puts windows ``doc_stride`` tokens apart, as ours), batched
    ``batch_size`` windows at a time, the best span by hand."""

    def __init__(self, model_dir: Path, max_length: int, doc_stride: int, max_query_length: int,
                 max_answer_length: int, batch_size: int):
        import transformers

        self.tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
        self.model = transformers.BertForQuestionAnswering.from_pretrained(model_dir).eval()
        self.max_length, self.doc_stride, self.max_query_length = max_length, doc_stride, max_query_length
        self.max_answer_length, self.batch_size = max_answer_length, batch_size

    def windows(self, question: str, context: str) -> list[dict]:
        tok = self.tokenizer
        q = tok(question, add_special_tokens=False, return_offsets_mapping=True)
        if len(q["input_ids"]) > self.max_query_length:
            question = question[:q["offset_mapping"][self.max_query_length - 1][1]]
        q_len = min(len(q["input_ids"]), self.max_query_length)
        n_doc = len(tok(context, add_special_tokens=False)["input_ids"])
        max_doc = self.max_length - q_len - 3
        enc = tok(question, context, truncation="only_second", max_length=self.max_length,
                  stride=max(max_doc - self.doc_stride, 0), return_overflowing_tokens=True,
                  return_offsets_mapping=True)
        spans = []
        for w in range(len(enc["input_ids"])):
            in_context = [s == 1 for s in enc.sequence_ids(w)]
            spans.append((w * self.doc_stride, sum(in_context)))
        assert spans[-1][0] + spans[-1][1] == n_doc, (question, spans, n_doc)
        flags = max_context(spans)
        out = []
        for w in range(len(enc["input_ids"])):
            in_context = np.array([s == 1 for s in enc.sequence_ids(w)])
            is_max = np.zeros(len(in_context), bool)
            is_max[np.flatnonzero(in_context)] = flags[w]
            out.append({"input_ids": enc["input_ids"][w], "token_type_ids": enc["token_type_ids"][w],
                        "offsets": enc["offset_mapping"][w], "in_context": in_context, "max_context": is_max})
        return out

    def __call__(self, questions: list[str], contexts: list[str]) -> list[str]:
        windows = [(i, w) for i, (q, c) in enumerate(zip(questions, contexts)) for w in self.windows(q, c)]
        best: dict[int, tuple[float, str]] = {}
        for b in range(0, len(windows), self.batch_size):
            chunk = windows[b:b + self.batch_size]
            batch = self.tokenizer.pad([{"input_ids": w["input_ids"], "token_type_ids": w["token_type_ids"]}
                                        for _, w in chunk], return_tensors="pt")
            with torch.inference_mode():
                out = self.model(**batch)
            for r, (i, w) in enumerate(chunk):
                n = len(w["input_ids"])
                span = best_span(out.start_logits[r, :n].numpy(), out.end_logits[r, :n].numpy(),
                                 w["max_context"], w["in_context"], self.max_answer_length)
                if span is not None and (i not in best or span[0] > best[i][0]):
                    a, e = w["offsets"][span[1]][0], w["offsets"][span[2]][1]
                    best[i] = (span[0], contexts[i][a:e])
        return [best.get(i, (0.0, ""))[1] for i in range(len(questions))]


# -- running --------------------------------------------------------------------------------------

def export(run: str, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "bert_exp.export", run, str(out)], check=True)
    return out


def timed(rounds: int, ours, theirs) -> tuple[list[float], list[float]]:
    """Seconds of each side per round, interleaved: ours, theirs, ours, theirs, ..."""
    a, b = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        ours()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs()
        b.append(time.perf_counter() - t)
    return a, b


def rate(n: int, seconds: list[float]) -> str:
    rates = sorted(n / s for s in seconds)
    return f"{statistics.median(rates):.0f} ({rates[0]:.0f}-{rates[-1]:.0f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrain", required=True, help="a pre-training run (fill-mask)")
    p.add_argument("--cola", required=True, help="a CoLA classification run")
    p.add_argument("--squad", required=True, help="a SQuAD run (its predictions.json and .hydra/config.yaml)")
    p.add_argument("--n", type=int, default=200, help="inputs per task (200)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--time-n", type=int, help="time only the first N inputs of each task (default: all of them)")
    p.add_argument("--work", help="where the exports go (default: a new temporary directory)")
    args = p.parse_args(argv)
    import transformers
    from omegaconf import OmegaConf

    transformers.logging.set_verbosity_error()  # the load reports of a pre-training export (NSP, pooler unused)

    work = Path(args.work or tempfile.mkdtemp(prefix="verify_predict_"))
    bs, rounds, tn = args.batch_size, args.rounds, args.time_n
    rows, notes = [], []
    load_before = os.getloadavg()

    # fill-mask
    model = export(args.pretrain, work / "pretrain")
    texts = masked_sentences(cola_sentences(DATA / "cola" / "raw" / "out_of_domain_dev.tsv"), args.n)
    ours_p = Predictor(model, device="cpu", precision="fp32", batch_size=bs, top_k=5)
    pipe = transformers.pipeline("fill-mask", model=str(model), device="cpu")
    ours, theirs = ours_p.fill_mask(texts), pipe(texts, batch_size=bs, top_k=5)
    c = compare_fill_mask(ours, theirs)
    t = texts[:tn]
    a, b = timed(rounds, lambda: ours_p.fill_mask(t), lambda: pipe(t, batch_size=bs, top_k=5))
    rows.append(("fill-mask", "pretrain_tiny (L2/H128)", f"{c['n']} CoLA ood dev, one word masked",
                 (f"top-1 {c['top1']}/{c['n']}, top-5 ids {c['topk']}/{c['n']}, scores within 1e-4 "
                  f"{c['close']}/{c['n']}"), f"{c['max_diff']:.1e}", "-", rate(len(t), a), rate(len(t), b)))

    # classification
    model = export(args.cola, work / "cola")
    texts = cola_sentences(DATA / "cola" / "raw" / "in_domain_dev.tsv")[:args.n]
    ours_p = Predictor(model, device="cpu", precision="fp32", batch_size=bs)
    pipe = transformers.pipeline("text-classification", model=str(model), device="cpu")
    ours, theirs = ours_p.classify(texts), pipe(texts, batch_size=bs, top_k=None)
    c = compare_classification(ours, theirs)
    t = texts[:tn]
    a, b = timed(rounds, lambda: ours_p.classify(t), lambda: pipe(t, batch_size=bs, top_k=None))
    share = sum(r["label"] == ours_p.labels[1] for r in ours)
    spread = [r["probabilities"][ours_p.labels[1]] for r in ours]
    notes.append(f"classification: {share}/{c['n']} labelled {ours_p.labels[1]}; its probability ranges "
                 f"{min(spread):.3f}-{max(spread):.3f}")
    rows.append(("text-classification", "cola_minilm (L6/H384)", f"{c['n']} CoLA in-domain dev",
                 f"labels {c['labels']}/{c['n']}, probabilities within 1e-4 {c['close']}/{c['n']}",
                 f"{c['max_diff']:.1e}", "-", rate(len(t), a), rate(len(t), b)))

    # question answering
    cfg = OmegaConf.load(Path(args.squad) / ".hydra" / "config.yaml")
    data = cfg.data
    settings = {"max_length": int(data.max_seq_length), "doc_stride": int(data.doc_stride),
                "max_query_length": int(data.max_query_length), "max_answer_length": int(data.max_answer_length)}
    run_predictions = json.loads((Path(args.squad) / "predictions.json").read_text(encoding="utf-8"))
    ids = list(run_predictions)[:args.n]
    qs = squad_questions(DATA / "squad" / "dev-v1.1.json", ids)  # the run's val_file (squad_v1_local)
    questions, contexts = [q for _, q, _ in qs], [c for _, _, c in qs]
    model = export(args.squad, work / "squad")
    ours_p = Predictor(model, device="cpu", precision="fp32", batch_size=bs, n_best_size=int(data.n_best_size),
                       **settings)
    ref = TransformersQA(model, batch_size=bs, **settings)
    ours = ours_p.answer(questions, contexts, ids)
    theirs = ref(questions, contexts)
    c = compare_answers(ours, theirs, run_predictions)
    tq, tc, ti = questions[:tn], contexts[:tn], ids[:tn]
    a, b = timed(rounds, lambda: ours_p.answer(tq, tc, ti), lambda: ref(tq, tc))
    windows = len([w for q, ctx in zip(questions, contexts) for w in ref.windows(q, ctx)])
    notes.append(f"question answering: {windows} windows for {c['n']} questions ({settings}); differing: "
                 f"{c['differ'] or 'none'}")
    rows.append(("question-answering", "squad_v1_minilm_local (L6/H384)",
                 f"{c['n']} SQuAD dev questions (the run's validation articles)",
                 f"answers {c['equal']}/{c['n']} (BertForQuestionAnswering by hand)", "-",
                 f"{c['run']}/{c['n']}", rate(len(tq), a), rate(len(tq), b)))

    load_after = os.getloadavg()
    print("| task | model | inputs | agreement with transformers | max prob. diff | = predictions.json "
          "| predict texts/s | transformers texts/s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(f"batch {bs}, fp32, CPU, torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
          f"{transformers.__version__}, {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after; {rounds} interleaved rounds, median (min-max)"
          + (f", on the first {tn} inputs of each task" if tn else ""))
    for note in notes:
        print(f"- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
