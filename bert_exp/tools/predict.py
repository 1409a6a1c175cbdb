"""``python -m bert_exp.predict SOURCE [TEXT ...]``: use a trained model; its head decides the task.

SOURCE is a run directory, a ``.ckpt`` of ours, an exported directory or a HuggingFace BERT directory.

* pre-training head: fill-mask, the top-k tokens and their probabilities for each ``[MASK]``;
* classification: the label and the probabilities (``--pair``: texts taken two by two as pairs; a TSV
  file with two columns), or the value of a regression head;
* question answering: ``--question Q --context C`` (or a SQuAD-format JSON, or JSONL of
  {question, context}): the answer with its character offsets, score and n-best, windows over long
  contexts as in training (``--doc-stride``). A SQuAD 2.0 model (a run with ``data.version_2``, or
  ``--null-threshold T``) answers "" (``no_answer``) when its null score beats the best span by more than
  the threshold; ``null_odds`` (null score - best span score) is shown either way;
* token classification: a label for every word (on its first sub-token, as in training) and the entity
  spans (CoNLL rules); long texts in windows, every word scored once.

Texts come from the command line or ``--file`` (.txt: one per line; .tsv or .csv: one or two columns; .jsonl:
{"text"[, "text_pair"]} or {"question", "context"}; .json: SQuAD). Results are JSON lines on stdout or in
``--output``. Inputs are batched by length; ``--precision bf16`` runs under bf16 autocast (``auto``: bf16
on a GPU that has it, fp32 elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..data.loading import DataFileError
from ..data.tasks import SquadExample, make_features, span_candidates, windows
from ..data.tasks.tables import json_objects, read_table
from ..data.tokenizer import checkpoint_tokenizer, tokenizer_kind
from ..errors import UserError
from ..metrics.tagging import entities
from ..model import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from ..model.hf import HEADS, TIED_KEYS, Checkpoint, CheckpointError
from ..tasks.checkpoints import load_checkpoint

TASKS = {"pretraining": "fill-mask", "classification": "classification",
         "question_answering": "question-answering", "token_classification": "token-classification"}
PRECISIONS = ("auto", "fp32", "bf16")


class PredictError(UserError, ValueError):
    """An input the model cannot take, or a task its head cannot do; the message says which."""


def _model_source(source: str | Path) -> Path:
    """A file that cannot be a checkpoint (text, JSON...) is named as such before torch tries to load it."""
    path = Path(source).expanduser()
    if path.is_file():
        with open(path, "rb") as f:
            magic = f.read(4)
        if not magic.startswith((b"PK\x03\x04", b"\x80")):
            raise CheckpointError(f"{path} is not a model: give a run directory, a .ckpt file, or a directory "
                                  "with config.json (an exported or HuggingFace BERT model)")
    return path


def run_record(source: str | Path) -> dict:
    """run.json of a run directory, or of the run a .ckpt inside one belongs to ({} for anything else)."""
    path = Path(source).expanduser()
    run_dir = path.parent.parent if path.suffix == ".ckpt" else path
    try:
        info = json.loads((run_dir / "run.json").read_text())
        return info if isinstance(info.get("config", {}).get("data"), dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def run_windows(source: str | Path) -> tuple[int | None, int | None]:
    """A question-answering run's windows (data.max_seq_length, data.doc_stride), for predicting over the
    windows it was trained and evaluated on; (None, None) when there is no such run."""
    data = run_record(source).get("config", {}).get("data", {})
    if "doc_stride" not in data:
        return None, None
    return data.get("max_seq_length"), data.get("doc_stride")


def run_null_threshold(source: str | Path) -> float | None:
    """The null-score threshold of a SQuAD 2.0 run, for a run directory or a .ckpt inside one (None
    otherwise): the one its last validation tuned on held-out questions (run.json metrics
    ``val/null_threshold``), else its configured data.null_score_diff_threshold."""
    info = run_record(source)
    data = info.get("config", {}).get("data", {})
    if not data.get("version_2"):
        return None
    tuned = (info.get("metrics") or {}).get("val/null_threshold")
    return float(tuned) if isinstance(tuned, (int, float)) else float(data.get("null_score_diff_threshold", 0.0))


def feature_layers(ckpt: Checkpoint) -> str:
    """Which layers the head reads (task.module.layers), as recorded; checkpoints written before it was
    recorded tell the two wider heads by their weights."""
    state = ckpt.state_dict
    if "mix_weights" in state:
        return "all"
    weight = state.get("classifier.weight", state.get("qa_outputs.weight"))
    if weight is not None and weight.ndim == 2 and weight.shape[1] == 4 * ckpt.config.hidden_size \
            and "lstm.weight_ih_l0" not in state:
        return "concat_last_4"
    return ckpt.extra.get("layers") or "last"


def build_model(ckpt: Checkpoint) -> torch.nn.Module:
    """The checkpoint's model with its head, weights loaded; a missing weight is an error."""
    config = ckpt.config
    layers = feature_layers(ckpt)
    if ckpt.head == "pretraining":
        model = BertForPreTraining(config)
    elif ckpt.head == "classification":
        model = BertForSequenceClassification(config, ckpt.num_labels or 2, layers=layers,
                                              pooling=ckpt.extra.get("pooling") or "cls")
    elif ckpt.head == "question_answering":
        model = BertForQuestionAnswering(config, layers=layers)
    elif ckpt.head == "token_classification":
        model = BertForTokenClassification(config, ckpt.num_labels or len(ckpt.labels or []) or 2, layers=layers,
                                           head_type=ckpt.extra.get("head_type") or "linear",
                                           lstm_size=ckpt.extra.get("lstm_size"))
    else:
        raise PredictError(f"{ckpt.source} is an encoder without a task head ({HEADS[ckpt.head]}): there is "
                           "nothing to predict; fine-tune it first (python -m bert_exp.tokenize and "
                           "python -m bert_exp.attention work on it)")
    own = model.state_dict()
    state = {k: v for k, v in ckpt.state_dict.items() if k in own}
    for key, value in state.items():
        if value.shape != own[key].shape:
            raise CheckpointError(f"{ckpt.source}: {key} has shape {tuple(value.shape)}, the model expects "
                                  f"{tuple(own[key].shape)}")
    missing, _ = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in TIED_KEYS]
    if missing:
        raise CheckpointError(f"{ckpt.source} lacks weights of its {ckpt.head} model: {missing[:5]}")
    return model.eval()


def classification_labels(ckpt: Checkpoint) -> list[str]:
    """The label names: a HuggingFace config's id2label, else LABEL_i (as transformers names them)."""
    n = ckpt.num_labels or 2
    config = Path(ckpt.source) / "config.json"
    if ckpt.labels and len(ckpt.labels) == n:
        return list(ckpt.labels)
    if config.is_file():
        id2label = json.loads(config.read_text()).get("id2label") or {}
        if len(id2label) == n:
            return [id2label[str(i)] for i in range(n)]
    return [f"LABEL_{i}" for i in range(n)]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@dataclass
class _Feature:
    """One model input: the ids and what the result needs to be put back together."""

    index: int  # the input (text, pair or question) it belongs to
    input_ids: list[int]
    token_type_ids: list[int]
    extra: dict = field(default_factory=dict)


class Predictor:
    """A trained model ready to predict: ``Predictor("outputs/cola_run")(["A sentence."])``.

    ``precision``: ``fp32``, ``bf16`` (autocast) or ``auto`` (bf16 on a GPU that supports it).
    ``truncation=False`` makes a text longer than the model takes an error instead of a warning."""

    def __init__(self, source: str | Path, device: str | None = None, precision: str = "auto",
                 batch_size: int = 32, max_length: int | None = None, top_k: int = 5, doc_stride: int | None = None,
                 max_query_length: int = 64, n_best_size: int = 20, max_answer_length: int = 30,
                 truncation: bool = True, warn=None, null_threshold: float | None = None):
        """``null_threshold``: answer "" when the null score beats the best span by more than this (SQuAD
        2.0); None takes it from the run (a v2.0 run's data.null_score_diff_threshold), else never."""
        if precision not in PRECISIONS:
            raise PredictError(f"precision {precision!r} is not one of {PRECISIONS}")
        self.ckpt = load_checkpoint(_model_source(source))
        self.model = build_model(self.ckpt)
        if not self.ckpt.vocab:
            raise PredictError(f"{self.ckpt.source} carries no vocabulary (vocab.txt or tokenizer.json)")
        self.tokenizer = checkpoint_tokenizer(self.ckpt.vocab, self.ckpt.lowercase, self.ckpt.tokenizer,
                                              source=self.ckpt.source)
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model.to(self.device)
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
        self.precision = precision
        positions = self.ckpt.config.max_position_embeddings
        self.max_length = min(max_length or positions, positions)
        self.batch_size, self.top_k, self.truncation = batch_size, top_k, truncation
        # question answering over the run's own windows (data.max_seq_length, data.doc_stride), else 384 / 128
        run_length, run_stride = run_windows(source)
        self.doc_stride = doc_stride if doc_stride is not None else run_stride or 128
        self.max_query_length = max_query_length
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
        self.null_threshold = null_threshold if null_threshold is not None else run_null_threshold(source)
        self.qa_length = min(max_length or run_length or 384, positions)
        self.warn = warn or (lambda message: print(f"warning: {message}", file=sys.stderr))
        self.progress = None  # a callable(n) told how many inputs are done (the CLI's progress bar)
        self.ids = {t: self.tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}
        if self.task == "classification":
            self.labels = classification_labels(self.ckpt)
        elif self.task == "token-classification":
            self.labels = self.ckpt.labels or [f"LABEL_{i}" for i in range(self.model.num_labels)]

    @property
    def task(self) -> str:
        return TASKS[self.ckpt.head]

    # -- running the model ------------------------------------------------------------------------

    def _autocast(self):
        if self.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _run(self, features: list[_Feature], fn) -> list:
        """``fn(batch) -> per-row outputs`` over length-grouped batches, in the features' order."""
        order = sorted(range(len(features)), key=lambda i: -len(features[i].input_ids))
        out: list = [None] * len(features)
        pad = self.ids["[PAD]"]
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            length = max(len(features[i].input_ids) for i in rows)
            ids = torch.full((len(rows), length), pad, dtype=torch.long)
            types = torch.zeros((len(rows), length), dtype=torch.long)
            mask = torch.zeros((len(rows), length), dtype=torch.long)
            for r, i in enumerate(rows):
                n = len(features[i].input_ids)
                ids[r, :n] = torch.tensor(features[i].input_ids)
                types[r, :n] = torch.tensor(features[i].token_type_ids)
                mask[r, :n] = 1
            batch = {"input_ids": ids.to(self.device), "token_type_ids": types.to(self.device),
                     "attention_mask": mask.to(self.device)}
            with torch.inference_mode(), self._autocast():
                results = fn(batch)
            for r, i in enumerate(rows):
                out[i] = results[r]
            if self.progress is not None:
                self.progress(len({features[i].index for i in rows}))
        return out

    # -- tokenising single texts and pairs --------------------------------------------------------

    def _encode(self, texts: list[str], pairs: list[str] | None = None) -> tuple[list[_Feature], list[dict]]:
        """[CLS] A [SEP] (B [SEP]) features, cut to ``max_length`` (longest first) with a warning, or an
        error with ``truncation=False``; and per input what was cut."""
        for n, text in enumerate([*texts, *(pairs or [])]):
            if not text.strip():
                raise PredictError(f"text {n % len(texts) + 1} is empty")
        inputs = list(zip(texts, pairs)) if pairs is not None else texts
        full = self.tokenizer.encode_batch(inputs)
        self.tokenizer.enable_truncation(self.max_length, strategy="longest_first")
        try:
            cut = self.tokenizer.encode_batch(inputs)
        finally:
            self.tokenizer.no_truncation()
        features, notes = [], []
        for n, (whole, enc) in enumerate(zip(full, cut)):
            note = {}
            if len(whole.ids) > len(enc.ids):
                note = self._truncation_note(n, texts[n], pairs[n] if pairs else None, whole, enc)
            features.append(_Feature(n, enc.ids, enc.type_ids, {"offsets": enc.offsets,
                                                                 "sequence_ids": enc.sequence_ids}))
            notes.append(note)
        return features, notes

    def _truncation_note(self, n: int, text: str, pair: str | None, whole, enc) -> dict:
        dropped = len(whole.ids) - len(enc.ids)
        kept_ends = {}
        for seq, offset in zip(enc.sequence_ids, enc.offsets):
            if seq is not None:
                kept_ends[seq] = offset[1]
        parts = [(0, text)] + ([(1, pair)] if pair is not None else [])
        cut_text = {("text" if s == 0 else "text_pair"): t[kept_ends.get(s, 0):].strip() for s, t in parts
                    if t[kept_ends.get(s, 0):].strip()}
        message = (f"text {n + 1}: {len(whole.ids)} tokens, the model takes {self.max_length}; the last "
                   f"{dropped} were cut: " + "; ".join(f"{k} from {v[:60]!r}{'...' if len(v) > 60 else ''}"
                                                     for k, v in cut_text.items()))
        if not self.truncation:
            raise PredictError(message)
        self.warn(message)
        return {"tokens": dropped, **cut_text}

    # -- the tasks --------------------------------------------------------------------------------

    def _require(self, task: str, what: str) -> None:
        if self.task != task:
            raise PredictError(f"{self.ckpt.source} is a {self.task} model ({HEADS[self.ckpt.head]}): it cannot "
                               f"do {what}; that needs a {task} model")

    def fill_mask(self, texts: list[str], top_k: int | None = None) -> list[dict]:
        """For each text, each [MASK]: the ``top_k`` tokens with their probabilities."""
        self._require("fill-mask", "fill-mask")
        k = top_k or self.top_k
        mask_id = self.ids["[MASK]"]
        features, notes = self._encode(texts)
        for n, f in enumerate(features):
            if mask_id not in f.input_ids:
                raise PredictError(f"text {n + 1} has no [MASK] left to fill" + (" (it was cut off)" if notes[n]
                                                                                 else "") + f": {texts[n]!r}")
        model = self.model

        def fn(batch):
            sequence, _ = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            where = batch["input_ids"] == mask_id
            probs = torch.softmax(model.cls.predictions(sequence[where]).float(), -1)
            top = probs.topk(min(k, probs.shape[-1]), -1)
            counts = where.sum(1).tolist()
            scores, ids = top.values.cpu().split(counts), top.indices.cpu().split(counts)
            return list(zip(scores, ids))

        results = []
        byte_level = tokenizer_kind(self.tokenizer) != "wordpiece"
        for n, (f, (scores, ids)) in enumerate(zip(features, self._run(features, fn))):
            text, filled, masks, shift = texts[n], texts[n], [], 0
            positions = [i for i, t in enumerate(f.input_ids) if t == mask_id]
            for position, row_scores, row_ids in zip(positions, scores, ids):
                start, end = f.extra["offsets"][position]
                predictions = [{"token": self.ckpt.vocab[int(i)], "token_id": int(i), "score": float(s)}
                               for s, i in zip(row_scores, row_ids)]
                masks.append({"position": position, "start": start, "end": end, "predictions": predictions})
                best = predictions[0]["token"]
                if byte_level:  # its bytes as text, less the space before it when the text has one already
                    best = self.tokenizer.decoder.decode([best])
                    best = best.removeprefix(" ") if start == 0 or text[start - 1].isspace() else best
                else:
                    best = best.removeprefix("##")
                filled = filled[:start + shift] + best + filled[end + shift:]
                shift += len(best) - (end - start)
            results.append({"text": text, "masks": masks, "filled": filled, **_truncated(notes[n])})
        return results

    def classify(self, texts: list[str], pairs: list[str] | None = None) -> list[dict]:
        """The label and the probabilities of each text (or pair); a regression head's value."""
        self._require("classification", "classification")
        if pairs is not None and len(pairs) != len(texts):
            raise PredictError(f"{len(texts)} first texts but {len(pairs)} second ones")
        features, notes = self._encode(texts, pairs)
        model = self.model
        logits = self._run(features, lambda b: model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
                           .float().cpu().numpy())
        results = []
        for n, row in enumerate(logits):
            record = {"text": texts[n], **({"text_pair": pairs[n]} if pairs is not None else {})}
            if len(self.labels) == 1:
                record["value"] = float(row[0])
            else:
                probs = _softmax(row)
                best = int(probs.argmax())
                record.update(label=self.labels[best], score=float(probs[best]),
                              probabilities={label: float(p) for label, p in zip(self.labels, probs)})
            results.append({**record, **_truncated(notes[n])})
        return results

    def answer(self, questions: list[str], contexts: list[str], ids: list[str] | None = None,
               top_k: int | None = None) -> list[dict]:
        """The best answer span of each (question, context), its character offsets in the context, its
        score (start x end probability within its window) and the ``top_k`` best spans."""
        self._require("question-answering", "question answering")
        if len(questions) != len(contexts):
            raise PredictError(f"{len(questions)} questions but {len(contexts)} contexts")
        k = top_k or self.top_k
        if self.doc_stride < 1:
            raise PredictError(f"--doc-stride {self.doc_stride}: at least 1")
        examples, longest = [], 0
        for n, (question, context) in enumerate(zip(questions, contexts)):
            if not question.strip() or not context.strip():
                raise PredictError(f"question {n + 1}: empty {'question' if not question.strip() else 'context'}")
            q_len = len(self.tokenizer.encode(question, add_special_tokens=False).ids)
            longest = max(longest, min(q_len, self.max_query_length))
            if q_len > self.max_query_length:
                message = (f"question {n + 1}: {q_len} tokens, at most {self.max_query_length} are used "
                           f"(--max-query-length); the rest was cut: {question[:60]!r}")
                if not self.truncation:
                    raise PredictError(message)
                self.warn(message)
            examples.append(SquadExample(ids[n] if ids else str(n), question, context, []))
        if self.qa_length - longest - 3 < 1:
            raise PredictError(f"--max-length {self.qa_length} leaves no room for the context beside a question "
                               f"of {longest} tokens")
        squad = make_features(examples, self.tokenizer, self.qa_length, self.doc_stride, self.max_query_length,
                              labels=False)
        features = [_Feature(f.example_index, f.input_ids, f.token_type_ids, {"squad": f}) for f in squad]
        model = self.model

        def fn(batch):
            start, end = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            return list(zip(start.float().cpu().numpy(), end.float().cpu().numpy()))

        by_example: dict[int, list] = {}
        null_scores: dict[int, float] = {}  # the smallest [CLS] score over an example's windows (as in training)
        for f, (start, end) in zip(features, self._run(features, fn)):
            squad_feature = f.extra["squad"]
            n = len(squad_feature.input_ids)
            start, end = start[:n], end[:n]
            null_scores[f.index] = min(null_scores.get(f.index, float("inf")), float(start[0] + end[0]))
            in_context = np.array([o is not None for o in squad_feature.offsets])
            log_start = _log_softmax_where(start, in_context)
            log_end = _log_softmax_where(end, in_context)
            for logit, s, e in span_candidates(squad_feature, start, end, self.n_best_size, self.max_answer_length):
                by_example.setdefault(f.index, []).append(
                    (logit, squad_feature.offsets[s][0], squad_feature.offsets[e][1],
                     float(np.exp(log_start[s] + log_end[e]))))
        results = []
        for n, example in enumerate(examples):
            spans, seen = [], set()
            for logit, a, b, score in sorted(by_example.get(n, []), key=lambda c: -c[0]):
                if (a, b) not in seen:
                    seen.add((a, b))
                    spans.append({"answer": example.context[a:b], "start": a, "end": b, "score": score,
                                  "logit": logit})
            best = spans[0] if spans else {"answer": "", "start": 0, "end": 0, "score": 0.0, "logit": None}
            result = {"id": example.qid, "question": example.question, **best}
            if self.null_threshold is not None:  # SQuAD 2.0: the null score against the best span
                odds = null_scores[n] - best["logit"] if spans else float("inf")
                result["null_odds"] = odds if spans else None
                result["no_answer"] = odds > self.null_threshold
                if result["no_answer"]:
                    result.update(answer="", start=0, end=0)
            results.append({**result, "n_best": spans[:k]})
        return results

    def tag(self, texts: list[str], window_context: int = 16) -> list[dict]:
        """A label for every word (the pre-tokeniser's words: whitespace and punctuation split) and the
        entities (CoNLL rules: B-X I-X ..., type, text and character span)."""
        self._require("token-classification", "token classification")
        special = self.ids
        budget = self.max_length - 2
        features, words_of = [], []
        for n, text in enumerate(texts):
            if not text.strip():
                raise PredictError(f"text {n + 1} is empty")
            enc = self.tokenizer.encode(text, add_special_tokens=False)
            pieces: dict[int, list[int]] = {}
            spans: dict[int, list[int]] = {}
            for token_id, word, (a, b) in zip(enc.ids, enc.word_ids, enc.offsets):
                pieces.setdefault(word, []).append(token_id)
                spans.setdefault(word, [a, b])[1] = b
            order = sorted(pieces)
            words = [spans[w] for w in order]
            pieces_list = [pieces[w] for w in order]
            words_of.append(words)
            lengths = [min(len(p), budget) for p in pieces_list]
            for first, last, left, right in windows(lengths, budget, window_context):
                ids, scored = [special["[CLS]"]], []
                for w in range(left, right):
                    if first <= w < last:
                        scored.append((w, len(ids)))
                    ids.extend(pieces_list[w][:budget])
                ids.append(special["[SEP]"])
                features.append(_Feature(n, ids, [0] * len(ids), {"scored": scored}))
        model = self.model
        outputs = self._run(features, lambda b: list(torch.softmax(
            model(b["input_ids"], b["token_type_ids"], b["attention_mask"]).float(), -1).cpu().numpy()))
        labelled: list[dict[int, tuple[str, float]]] = [{} for _ in texts]
        for f, probs in zip(features, outputs):
            for w, position in f.extra["scored"]:
                best = int(probs[position].argmax())
                labelled[f.index][w] = (self.labels[best], float(probs[position][best]))
        results = []
        for n, text in enumerate(texts):
            words = [{"word": text[a:b], "start": a, "end": b, "label": labelled[n][w][0],
                      "score": labelled[n][w][1]} for w, (a, b) in enumerate(words_of[n])]
            found = []
            for kind, first, last in sorted(entities([w["label"] for w in words]), key=lambda e: e[1]):
                a, b = words[first]["start"], words[last]["end"]
                found.append({"type": kind, "text": text[a:b], "start": a, "end": b,
                              "score": float(np.mean([w["score"] for w in words[first:last + 1]]))})
            results.append({"text": text, "words": words, "entities": found})
        return results

    def __call__(self, texts: list[str] | None = None, pairs: list[str] | None = None,
                 questions: list[str] | None = None, contexts: list[str] | None = None,
                 ids: list[str] | None = None) -> list[dict]:
        """Whatever the head does, on these inputs."""
        if questions is not None or contexts is not None:
            self._require("question-answering", "question answering (--question/--context)")
            return self.answer(questions or [], contexts or [], ids)
        if self.task == "question-answering":
            raise PredictError(f"{self.ckpt.source} answers questions: give --question and --context, or a "
                               "SQuAD JSON / JSONL file of {question, context}")
        if pairs is not None and self.task != "classification":
            raise PredictError(f"{self.ckpt.source} is a {self.task} model: only a classifier takes pairs")
        texts = texts or []
        if not texts:
            raise PredictError("no texts to predict")
        if self.task == "fill-mask":
            return self.fill_mask(texts)
        if self.task == "classification":
            return self.classify(texts, pairs)
        return self.tag(texts)


def _log_softmax_where(x: np.ndarray, where: np.ndarray) -> np.ndarray:
    out = np.full(x.shape, -np.inf)
    if where.any():
        values = x[where].astype(np.float64)
        top = values.max()
        out[where] = values - top - np.log(np.exp(values - top).sum())
    return out


def _truncated(note: dict) -> dict:
    return {"truncated": note} if note else {}


# -- reading inputs -------------------------------------------------------------------------------

@dataclass
class Inputs:
    texts: list[str] | None = None
    pairs: list[str] | None = None
    questions: list[str] | None = None
    contexts: list[str] | None = None
    ids: list[str] | None = None

    def __len__(self) -> int:
        return len(self.questions if self.questions is not None else self.texts or [])


def read_inputs(path: str | Path) -> Inputs:
    """A file of inputs: .json (SQuAD), .jsonl, .tsv or .csv (one or two columns) or text (one per line)."""
    path = Path(path)
    if not path.is_file():
        raise PredictError(f"{path}: no such file")
    raw = path.read_text(encoding="utf-8-sig")  # a leading byte-order mark dropped
    if not raw.strip():
        raise PredictError(f"{path}: the file is empty")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _read_squad_inputs(path, raw)
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix in (".tsv", ".csv"):  # one or two columns, no header: through the data sets' table reader
        try:
            rows = read_table(path, header=False).rows
        except DataFileError as err:
            raise PredictError(str(err)) from None
        if not rows:
            raise PredictError(f"{path}: no rows")
        word, first = "tab-separated" if suffix == ".tsv" else "comma-separated", len(rows[0][1])
        for where, cols in rows:
            if len(cols) not in (1, 2) or len(cols) != first:
                raise PredictError(f"{where}: expected {first if first in (1, 2) else '1 or 2'} {word} columns "
                                   f"(a text, or a pair), found {len(cols)}")
        if first == 2:
            return Inputs([c[0] for _, c in rows], [c[1] for _, c in rows])
        return Inputs([c[0] for _, c in rows])
    return Inputs([line.rstrip("\r") for line in raw.split("\n") if line.strip()])


def _read_jsonl(path: Path) -> Inputs:
    try:
        records = [(where.rpartition(":")[2], record) for where, record in json_objects(path)]
    except DataFileError as err:
        raise PredictError(str(err)) from None
    if all("question" in r and "context" in r for _, r in records):
        return Inputs(questions=[str(r["question"]) for _, r in records],
                      contexts=[str(r["context"]) for _, r in records],
                      ids=[str(r.get("id", i)) for i, (_, r) in enumerate(records)])
    for n, record in records:
        if not isinstance(record.get("text"), str):
            raise PredictError(f"{path}:{n}: expected {{\"text\": ...}} (and \"text_pair\" for a pair), or "
                               "{\"question\": ..., \"context\": ...}")
    has_pairs = {("text_pair" in r) for _, r in records}
    if has_pairs == {True, False}:
        raise PredictError(f"{path}: some records have a text_pair and some do not")
    return Inputs([r["text"] for _, r in records], [r["text_pair"] for _, r in records] if has_pairs == {True} else None)


def _read_squad_inputs(path: Path, raw: str) -> Inputs:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise PredictError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise PredictError(f"{path}: expected SQuAD's {{\"data\": [{{\"paragraphs\": [...]}}]}}")
    inputs = Inputs(questions=[], contexts=[], ids=[])
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", []) if isinstance(article, dict) else []):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                raise PredictError(f"{path}: data[{a}].paragraphs[{p}] has no context")
            for q, qa in enumerate(paragraph.get("qas", [])):
                if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
                    raise PredictError(f"{path}: data[{a}].paragraphs[{p}].qas[{q}] has no question")
                inputs.questions.append(qa["question"])
                inputs.contexts.append(paragraph["context"])
                inputs.ids.append(str(qa.get("id", len(inputs.ids))))
    if not inputs.questions:
        raise PredictError(f"{path}: no questions")
    return inputs


# -- the command ----------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bert_exp.predict", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="run directory, .ckpt, exported or HuggingFace BERT directory")
    p.add_argument("texts", nargs="*", help="texts to predict on")
    p.add_argument("--file", help="inputs: .txt (a text a line), .tsv or .csv (1-2 columns), .jsonl, .json (SQuAD)")
    p.add_argument("--output", help="write JSON lines here instead of stdout")
    p.add_argument("--pair", action="store_true", help="classification: the texts are pairs, two by two")
    p.add_argument("--question", action="append", help="question answering: the question (repeatable)")
    p.add_argument("--context", action="append", help="question answering: the context (one per question)")
    p.add_argument("--top-k", type=int, default=5, help="fill-mask tokens / n-best answers shown (5)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, help="tokens per input (default: the model's positions; QA: the "
                   "run's data.max_seq_length, else 384)")
    p.add_argument("--doc-stride", type=int, help="QA: tokens between window starts (the run's data.doc_stride, "
                   "else 128)")
    p.add_argument("--max-query-length", type=int, default=64)
    p.add_argument("--max-answer-length", type=int, default=30)
    p.add_argument("--null-threshold", type=float, help="QA, SQuAD 2.0: answer \"\" when the null score beats the "
                   "best span by more than this (default: a v2.0 run's own; other models never)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="bf16: autocast (CPUs with AMX, recent GPUs); auto: bf16 on such a GPU, fp32 elsewhere")
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda when present)")
    p.add_argument("--no-truncation", action="store_true", help="a text longer than the model takes is an error")
    return p


def gather_inputs(args) -> Inputs:
    given = sum(x is not None and x != [] for x in (args.file, args.question or None, args.texts or None))
    if given > 1:
        raise PredictError("give texts, --file, or --question/--context: one of them")
    if args.question or args.context:
        if len(args.question or []) != len(args.context or []):
            raise PredictError("--question and --context go together, one context per question")
        return Inputs(questions=args.question, contexts=args.context)
    if args.file:
        inputs = read_inputs(args.file)
        if args.pair and inputs.pairs is None:
            raise PredictError(f"--pair: {args.file} has no second column")
        return inputs
    if not args.texts:
        raise PredictError("nothing to predict: give texts, --file, or --question and --context")
    if args.pair:
        if len(args.texts) % 2:
            raise PredictError(f"--pair takes texts two by two; {len(args.texts)} were given")
        return Inputs(args.texts[0::2], args.texts[1::2])
    return Inputs(list(args.texts))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_intermixed_args(argv)
    try:
        inputs = gather_inputs(args)
        predictor = Predictor(args.source, args.device, args.precision, args.batch_size, args.max_length,
                              args.top_k, args.doc_stride, args.max_query_length,
                              max_answer_length=args.max_answer_length, truncation=not args.no_truncation,
                              null_threshold=args.null_threshold)
        progress = None
        if args.file:
            from tqdm import tqdm

            progress = tqdm(total=len(inputs), desc=Path(args.file).name, unit="input", file=sys.stderr,
                            disable=len(inputs) < 64)
            predictor.progress = progress.update
        try:
            results = predictor(inputs.texts, inputs.pairs, inputs.questions, inputs.contexts, inputs.ids)
        finally:
            if progress is not None:
                progress.close()
        lines = [json.dumps(r, ensure_ascii=False) for r in results]
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
            print(f"{len(results)} {predictor.task} predictions written to {args.output}", file=sys.stderr)
        else:
            for line in lines:
                print(line)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
