"""SQuAD v1.1 / v2.0: reading and validating the JSON, windowed features, and post-processing.

Features follow the original BERT ``run_squad.py``: the question is cut to ``max_query_length`` tokens;
the context is cut into windows of ``max_seq_length - len(question) - 3`` tokens whose starts are
``doc_stride`` tokens apart; each window is ``[CLS] question [SEP] context-window [SEP]``. Character
offsets come from ``tokenizers``, so a predicted token span maps back to the exact characters of the
original context. A training label is the answer's first and last token, or [CLS] (index 0) when the
question is unanswerable or its answer is not inside the window. At evaluation a span may start only
at a token whose window is its "max context" window (the original's rule for overlapping windows).
"""

from __future__ import annotations

import collections
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from ...metrics.squad import answerability, evaluate_v1, evaluate_v2, tune_null_threshold
from ..base import VocabularyDataModule
from ..loading import DataFileError, EncodedDataset, LoaderSettings, pad_batch, read_utf8


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[dict]  # {"text", "answer_start"}; empty when unanswerable
    is_impossible: bool = False
    title: str = ""


def _require(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise DataFileError(f"{where}: {message}")


_QUESTION_KINDS = ("all", "answerable", "unanswerable")


@dataclass(frozen=True)
class SquadSelection:
    """Which questions of one SQuAD file: the articles by title (``titles``: only these; ``exclude_titles``:
    all but these) or by position (``articles``: ``[start, end)``), and which kind of question. Titles
    select the same questions in the official files and in copies that renumber or split them."""

    file: str
    titles: tuple[str, ...] | None = None
    exclude_titles: tuple[str, ...] = ()
    articles: tuple[int | None, ...] | None = None
    questions: str = "all"  # all | answerable | unanswerable

    @classmethod
    def parse(cls, value, articles=None, where: str = "data") -> "SquadSelection":
        """A path (with the older ``*_articles`` range) or a mapping {file, titles, exclude_titles, articles,
        questions}."""
        if isinstance(value, (str, Path)):
            return cls(str(value), articles=tuple(articles) if articles else None)
        if not hasattr(value, "keys") or "file" not in value:
            raise DataFileError(f"{where}: expected a path or a mapping with 'file', got {value!r}")
        unknown = set(value.keys()) - {"file", "titles", "exclude_titles", "articles", "questions"}
        if unknown:
            raise DataFileError(f"{where}: unknown keys {sorted(unknown)} (file, titles, exclude_titles, articles, "
                                "questions)")
        questions = value.get("questions") or "all"
        if questions not in _QUESTION_KINDS:
            raise DataFileError(f"{where}.questions: {questions!r} is not one of {', '.join(_QUESTION_KINDS)}")
        titles = value.get("titles")
        ranged = value.get("articles") or articles
        return cls(str(value["file"]), tuple(titles) if titles is not None else None,
                   tuple(value.get("exclude_titles") or ()), tuple(ranged) if ranged else None, questions)

    def excluding(self, titles) -> "SquadSelection":
        return SquadSelection(self.file, self.titles, tuple(dict.fromkeys([*self.exclude_titles, *titles])),
                              self.articles, self.questions)

    def read(self) -> list[SquadExample]:
        return read_squad(self.file, list(self.articles) if self.articles else None, self.titles,
                          self.exclude_titles, self.questions)


def selections(value, articles=None, where: str = "data") -> list[SquadSelection]:
    """One selection or a list of them (a training set drawn from several files)."""
    if isinstance(value, (str, Path)) or hasattr(value, "keys"):
        return [SquadSelection.parse(value, articles, where)]
    return [SquadSelection.parse(item, articles, f"{where}[{i}]") for i, item in enumerate(value)]


def read_squad(path: str | Path, articles: list[int | None] | None = None, titles=None, exclude_titles=(),
               questions: str = "all") -> list[SquadExample]:
    """The questions of the file, validated: all of them, or those of the articles ``[start, end)``, of the
    articles named in ``titles`` (each must be in the file), of every article but ``exclude_titles``;
    ``questions`` keeps only the answerable or the unanswerable ones."""
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file (set $BERT_EXP_DATA or the data.* paths)")
    try:
        raw = json.loads(read_utf8(path))
    except json.JSONDecodeError as err:
        raise DataFileError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    _require(isinstance(raw, dict) and isinstance(raw.get("data"), list), str(path), "expected {\"data\": [...]}")
    data = raw["data"]
    selected = range(len(data))[slice(*articles)] if articles else range(len(data))
    title = [article.get("title") if isinstance(article, dict) else None for article in data]
    if titles is not None:
        present = set(title)
        missing = [t for t in titles if t not in present]
        _require(not missing, str(path), f"no article titled {', '.join(map(repr, missing))}")
        selected = [a for a in selected if title[a] in set(titles)]
    excluded = set(exclude_titles)
    selected = [a for a in selected if title[a] not in excluded]
    examples, seen = [], set()
    for a in selected:
        article, where_a = data[a], f"{path}: data[{a}]"
        _require(isinstance(article, dict) and isinstance(article.get("paragraphs"), list), where_a, "no paragraphs list")
        for p, paragraph in enumerate(article["paragraphs"]):
            where_p = f"{where_a}.paragraphs[{p}]"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            _require(isinstance(context, str) and context.strip() != "", where_p, "missing or empty 'context'")
            _require(isinstance(paragraph.get("qas"), list), where_p, "no 'qas' list")
            for q, qa in enumerate(paragraph["qas"]):
                where = f"{where_p}.qas[{q}]"
                _require(isinstance(qa, dict), where, "not an object")
                for key in ("id", "question", "answers"):
                    _require(key in qa, where, f"missing {key!r}")
                _require(isinstance(qa["question"], str) and qa["question"].strip() != "", where, "empty question")
                _require(isinstance(qa["id"], (str, int)) and not isinstance(qa["id"], bool) and str(qa["id"]) != "",
                         where, f"'id' {qa['id']!r} is not a string")
                _require(str(qa["id"]) not in seen, where, f"duplicate id {qa['id']!r}")  # 1 and "1": one id
                seen.add(str(qa["id"]))
                impossible = qa.get("is_impossible", False)
                _require(isinstance(impossible, bool), where,
                         f"'is_impossible' is {impossible!r}, not true or false (a JSON boolean)")
                answers = qa["answers"]
                _require(isinstance(answers, list), where, "'answers' is not a list")
                _require(impossible or answers, where, "no answers and not is_impossible")
                for n, answer in enumerate(answers):
                    _require(isinstance(answer, dict) and isinstance(answer.get("text"), str)
                             and isinstance(answer.get("answer_start"), int)
                             and not isinstance(answer.get("answer_start"), bool), f"{where}.answers[{n}]",
                             "needs 'text' and an integer 'answer_start'")
                    _require(answer["answer_start"] >= 0, f"{where}.answers[{n}] (question id {qa['id']})",
                             f"answer_start {answer['answer_start']} is negative")
                    start = answer["answer_start"]
                    _require(context[start:start + len(answer["text"])] == answer["text"],
                             f"{where}.answers[{n}] (question id {qa['id']})",
                             f"answer_start {start} does not point at {answer['text']!r} in the context")
                if questions == "answerable" and impossible or questions == "unanswerable" and not impossible:
                    continue
                examples.append(SquadExample(str(qa["id"]), qa["question"], context,
                                             [] if impossible else answers, impossible, article.get("title", "")))
    if not examples:
        which = f"articles {articles}" if articles else f"articles {list(titles)}" if titles is not None else "it"
        raise DataFileError(f"{path}: no {'' if questions == 'all' else questions + ' '}questions in {which}")
    return examples


def read_parts(parts: list[SquadSelection]) -> list[list[SquadExample]]:
    """The questions of each selection; a question id may appear once across them (two files that hold the
    same question under one id would train on it twice)."""
    out, seen = [], {}
    for part in parts:
        rows = part.read()
        for example in rows:
            if example.qid in seen:
                raise DataFileError(f"{part.file}: question id {example.qid!r} is also in {seen[example.qid]}")
            seen[example.qid] = part.file
        out.append(rows)
    return out


def read_selections(parts: list[SquadSelection]) -> list[SquadExample]:
    """The questions of several selections, in order (see :func:`read_parts`)."""
    return [example for rows in read_parts(parts) for example in rows]


def check_no_shared_contexts(train: list[SquadExample], held_out: list[SquadExample], what: str) -> None:
    """No paragraph of the held-out questions is in the training questions (by text, whatever the titles)."""
    held = {e.context for e in held_out}
    shared = sorted({e.title for e in train if e.context in held})
    if shared:
        raise DataFileError(f"the training questions share paragraphs with the {what} questions "
                            f"(training articles {', '.join(shared)}): exclude those articles from training")


@dataclass
class SquadFeature:
    example_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int] | None]  # character span in the context, None outside the context
    max_context: list[bool]  # per token: is this window the token's best-centred window
    start_position: int = 0
    end_position: int = 0
    extra: dict = field(default_factory=dict)


def _max_context_score(window_start: int, window_length: int, position: int) -> float:
    left, right = position - window_start, window_start + window_length - 1 - position
    return min(left, right) + 0.01 * window_length


def answer_token_span(offsets: list[tuple[int, int]], start_char: int, end_char: int) -> tuple[int, int]:
    """First and last context tokens covering the characters [start_char, end_char)."""
    starts = np.array([o[0] for o in offsets])
    ends = np.array([o[1] for o in offsets])
    start = int(np.searchsorted(ends, start_char, side="right"))  # first token ending after start_char
    end = int(np.searchsorted(starts, end_char, side="left")) - 1  # last token starting before end_char
    return start, max(end, start)


def make_features(examples: list[SquadExample], tokenizer: Tokenizer, max_seq_length: int = 384,
                  doc_stride: int = 128, max_query_length: int = 64, labels: bool = True) -> list[SquadFeature]:
    tokenizer.no_truncation()
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    contexts = tokenizer.encode_batch([e.context for e in examples], add_special_tokens=False)
    features = []
    for index, (example, q_enc, c_enc) in enumerate(zip(examples, questions, contexts)):
        query = q_enc.ids[:max_query_length]
        doc_ids, doc_offsets = c_enc.ids, c_enc.offsets
        max_doc = max_seq_length - len(query) - 3
        windows, start = [], 0
        while start < len(doc_ids):
            length = min(len(doc_ids) - start, max_doc)
            windows.append((start, length))
            if start + length == len(doc_ids):
                break
            start += min(length, doc_stride)
        answer_span = None
        if labels and example.answers:
            first = example.answers[0]
            answer_span = answer_token_span(doc_offsets, first["answer_start"], first["answer_start"] + len(first["text"]))
        for w_start, w_len in windows:
            ids = [cls_id, *query, sep_id, *doc_ids[w_start:w_start + w_len], sep_id]
            types = [0] * (len(query) + 2) + [1] * (w_len + 1)
            prefix = len(query) + 2
            offsets = [None] * prefix + list(doc_offsets[w_start:w_start + w_len]) + [None]
            max_context = [False] * prefix + ([True] * w_len if len(windows) == 1 else [
                max(((s, n) for s, n in windows if s <= pos < s + n), key=lambda w: _max_context_score(w[0], w[1], pos))
                == (w_start, w_len) for pos in range(w_start, w_start + w_len)]) + [False]
            feature = SquadFeature(index, ids, types, offsets, max_context)
            if answer_span is not None and w_start <= answer_span[0] and answer_span[1] < w_start + w_len:
                feature.start_position = answer_span[0] - w_start + prefix
                feature.end_position = answer_span[1] - w_start + prefix
            features.append(feature)
    return features


def span_candidates(feature: SquadFeature, start: np.ndarray, end: np.ndarray, n_best_size: int = 20,
                    max_answer_length: int = 30) -> list[tuple[float, int, int]]:
    """(start logit + end logit, first token, last token) of the spans the original considers: the
    ``n_best_size`` best starts x ends, inside the context, the start in its max-context window, at most
    ``max_answer_length`` tokens; in the order the original visits them."""
    n = len(feature.input_ids)
    start, end = start[:n], end[:n]
    out = []
    for s in np.argsort(start)[::-1][:n_best_size]:
        if feature.offsets[s] is None or not feature.max_context[s]:
            continue
        for e in np.argsort(end)[::-1][:n_best_size]:
            if feature.offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                continue
            out.append((float(start[s] + end[e]), int(s), int(e)))
    return out


def postprocess(examples: list[SquadExample], features: list[SquadFeature], start_logits: list[np.ndarray],
                end_logits: list[np.ndarray], n_best_size: int = 20, max_answer_length: int = 30,
                version_2: bool = False, null_score_diff_threshold: float = 0.0):
    """Best answer text per question id, and (v2.0) null odds = null score - best span score.

    The null score of a question is the smallest [CLS] score over its windows (as the original).
    A v2.0 prediction is "" when its null odds exceed ``null_score_diff_threshold``.
    """
    by_example = collections.defaultdict(list)
    for i, feature in enumerate(features):
        by_example[feature.example_index].append(i)
    predictions, null_odds = {}, {}
    for index, example in enumerate(examples):
        best_score, best_text, null_score = -math.inf, "", math.inf
        for i in by_example.get(index, []):
            feature, start, end = features[i], start_logits[i], end_logits[i]
            n = len(feature.input_ids)
            start, end = start[:n], end[:n]
            null_score = min(null_score, float(start[0] + end[0]))
            for score, s, e in span_candidates(feature, start, end, n_best_size, max_answer_length):
                if score > best_score:
                    best_score = score
                    best_text = example.context[feature.offsets[s][0]:feature.offsets[e][1]]
        if version_2:
            diff = null_score - best_score if best_score > -math.inf else math.inf
            null_odds[example.qid] = diff if math.isfinite(diff) else 1e9
            predictions[example.qid] = "" if diff > null_score_diff_threshold else best_text
        else:
            predictions[example.qid] = best_text
    return predictions, null_odds


@dataclass
class AnswerSelection:
    """How logits become answers (the original run_squad.py's flags)."""

    n_best_size: int = 20
    max_answer_length: int = 30
    version_2: bool = False
    null_score_diff_threshold: float = 0.0


@dataclass
class SquadEvaluator:
    """The validation questions, their features and how to score logits for them; what the QA task
    module is handed, so it never reaches into a DataModule. Filled when the DataModule sets up.

    With ``tune_examples`` (v2.0: held-out training questions), the null-score threshold is the one
    that scores best on them, and the evaluated questions are answered at that threshold; their
    features follow the evaluated ones in ``scored_features`` (one validation pass scores both)."""

    selection: AnswerSelection = field(default_factory=AnswerSelection)
    examples: list[SquadExample] = field(default_factory=list)
    features: list[SquadFeature] = field(default_factory=list)
    tune_examples: list[SquadExample] = field(default_factory=list)
    tune_features: list[SquadFeature] = field(default_factory=list)

    @property
    def version_2(self) -> bool:
        return self.selection.version_2

    @property
    def scored_features(self) -> list[SquadFeature]:
        """The features validation computes logits for: the evaluated questions', then the tuning ones'."""
        return self.features + self.tune_features

    def answers(self, start_logits, end_logits, threshold: float | None = None):
        s = self.selection
        threshold = s.null_score_diff_threshold if threshold is None else threshold
        return postprocess(self.examples, self.features, start_logits, end_logits, s.n_best_size,
                           s.max_answer_length, s.version_2, threshold)

    def tune_threshold(self, start_logits, end_logits) -> tuple[float, float]:
        """The null-score threshold that maximises F1 on the tuning questions, and that F1."""
        s = self.selection
        spans, null_odds = postprocess(self.tune_examples, self.tune_features, start_logits, end_logits,
                                       s.n_best_size, s.max_answer_length, True, math.inf)
        return tune_null_threshold(self.tune_examples, spans, null_odds)

    def evaluate(self, start_logits, end_logits) -> tuple[dict, dict, dict[str, float]]:
        """Predictions, null odds and metrics for the logits of ``scored_features`` (in that order)."""
        n = len(self.features)
        tuned = {}
        threshold = None
        if self.version_2 and self.tune_examples:
            threshold, tune_f1 = self.tune_threshold(start_logits[n:], end_logits[n:])
            tuned = {"null_threshold": threshold, "threshold_f1": tune_f1}
        if not self.version_2:
            predictions, null_odds = self.answers(start_logits[:n], end_logits[:n])
            return predictions, null_odds, self.score(predictions, null_odds)
        spans, null_odds = self.answers(start_logits[:n], end_logits[:n], math.inf)  # the best span of each
        threshold = self.selection.null_score_diff_threshold if threshold is None else threshold
        predictions = {qid: "" if null_odds[qid] > threshold else span for qid, span in spans.items()}
        diagnosis = answerability(self.examples, spans, null_odds)
        return predictions, null_odds, {**self.score(predictions, null_odds), **tuned, **diagnosis}

    def score(self, predictions: dict, null_odds: dict) -> dict[str, float]:
        """The official metrics: exact_match and f1 (and v2.0's HasAns/NoAns breakdown)."""
        if self.version_2:
            result = evaluate_v2(self.examples, predictions, null_odds)
            return {"exact_match": result["exact"], "f1": result["f1"],
                    **{k: v for k, v in result.items() if k not in ("exact", "f1", "total") and "total" not in k}}
        result = evaluate_v1(self.examples, predictions)
        return {"exact_match": result["exact_match"], "f1": result["f1"]}


class SquadDataModule(VocabularyDataModule):
    """SQuAD v1.1 or v2.0 JSON. Each of ``train_file``, ``val_file`` and ``threshold_file`` is a path (with
    ``train_articles`` / ``val_articles`` as position ranges) or a selection {file, titles, exclude_titles,
    articles, questions}; ``train_file`` may be a list of selections (SQuAD 2.0's training set is v1.1's
    questions plus unanswerable ones on the same articles). Training never holds an article that is
    evaluated or tunes the threshold: those titles are left out of it, and a paragraph shared anyway stops
    the run. ``threshold_file`` (v2.0): held-out questions the null-score threshold is tuned on."""

    def __init__(
        self,
        train_file,
        val_file,
        version_2: bool = False,
        train_articles: list[int | None] | None = None,
        val_articles: list[int | None] | None = None,
        max_seq_length: int = 384,
        doc_stride: int = 128,
        max_query_length: int = 64,
        n_best_size: int = 20,
        max_answer_length: int = 30,
        null_score_diff_threshold: float = 0.0,
        threshold_file=None,
        vocab_file: str | None = None,
        lowercase: bool = True,
        loader: LoaderSettings = LoaderSettings(eval_batch_size=64),
        limit_train_examples: int | None = None,
        limit_val_examples: int | None = None,
        seed: int = 0,
        download: bool = True,
    ):
        super().__init__(vocab_file, lowercase, download, loader)
        loader.refuse_grouping("question answering")
        self.seed = seed
        self.val_selection = selections(val_file, val_articles, "data.val_file")
        self.tune_selection = selections(threshold_file, None, "data.threshold_file") if threshold_file else []
        if len(self.val_selection) != 1:
            raise DataFileError("data.val_file: one file (or one selection) is evaluated")
        if self.tune_selection and not version_2:
            raise DataFileError("data.threshold_file tunes SQuAD 2.0's null-score threshold: set data.version_2=true")
        held_out = [t for part in self.val_selection + self.tune_selection for t in part.titles or ()]
        self.train_selection = [part.excluding(held_out)
                                for part in selections(train_file, train_articles, "data.train_file")]
        self.version_2 = version_2
        self.max_seq_length, self.doc_stride, self.max_query_length = max_seq_length, doc_stride, max_query_length
        self.n_best_size, self.max_answer_length = n_best_size, max_answer_length
        self.null_score_diff_threshold = null_score_diff_threshold
        self.limit_train_examples, self.limit_val_examples = limit_train_examples, limit_val_examples
        self.evaluator = SquadEvaluator(AnswerSelection(n_best_size, max_answer_length, version_2,
                                                        null_score_diff_threshold))

    def input_files(self) -> list[Path]:
        parts = self.train_selection + self.val_selection + self.tune_selection
        return list(dict.fromkeys(Path(part.file) for part in parts))

    def _parts(self, parts: list[SquadSelection]) -> list[list[SquadExample]]:
        """:func:`read_parts`, a SQuAD 2.0 file read as v1.1 refused (v1.1 scores and trains on answers
        every question has)."""
        rows = read_parts(parts)
        for part, examples in zip(parts, rows):
            unanswerable = sum(e.is_impossible for e in examples)
            if unanswerable and not self.version_2:
                raise DataFileError(f"{part.file}: {unanswerable:,} of its {len(examples):,} questions are unanswerable "
                                    "(is_impossible: SQuAD 2.0), read with data.version_2=false: set "
                                    "data.version_2=true (or questions: answerable in the selection)")
        return rows

    def _selections(self, parts: list[SquadSelection]) -> list[SquadExample]:
        return [example for rows in self._parts(parts) for example in rows]

    def _features(self, examples, labels):
        return make_features(examples, self.tokenizer, self.max_seq_length, self.doc_stride, self.max_query_length,
                             labels)

    def training_examples(self, evaluated: list[SquadExample] | None = None,
                          tuning: list[SquadExample] | None = None) -> list[SquadExample]:
        """The training questions, checked to share no paragraph with the evaluated or tuning ones (read here
        unless given), and cut to ``limit_train_examples`` from each selection in proportion to its size (the
        first N of a v1.1-then-v2.0 list would hold no unanswerable question)."""
        parts = self._parts(self.train_selection)
        train = [example for rows in parts for example in rows]
        check_no_shared_contexts(train, self._selections(self.val_selection) if evaluated is None else evaluated,
                                 "evaluated")
        if self.tune_selection:
            check_no_shared_contexts(train, self._selections(self.tune_selection) if tuning is None else tuning,
                                     "threshold-tuning")
        limit = self.limit_train_examples
        if not limit or limit >= len(train):
            return train
        return [e for rows in parts for e in rows[:math.ceil(limit * len(rows) / len(train))]][:limit]

    def setup(self, stage: str | None = None) -> None:
        evaluated = self._selections(self.val_selection)
        tuning = self._selections(self.tune_selection) if self.tune_selection else []
        if stage in (None, "fit"):
            train = self._features(self.training_examples(evaluated, tuning), True)
            self.train_dataset = EncodedDataset([
                {"input_ids": f.input_ids, "token_type_ids": f.token_type_ids,
                 "start_positions": f.start_position, "end_positions": f.end_position} for f in train])
        evaluator, limit = self.evaluator, self.limit_val_examples
        evaluator.examples = evaluated[:limit]
        evaluator.features = self._features(evaluator.examples, False)
        evaluator.tune_examples = tuning[:limit]
        evaluator.tune_features = self._features(evaluator.tune_examples, False)
        self.val_dataset = EncodedDataset([
            {"input_ids": f.input_ids, "token_type_ids": f.token_type_ids, "feature_index": i}
            for i, f in enumerate(evaluator.scored_features)])

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = pad_batch(features, self.special_ids.pad, loader=self.loader, max_seq_length=self.max_seq_length)
        for key in ("start_positions", "end_positions", "feature_index"):
            if key in features[0]:
                batch[key] = torch.tensor([f[key] for f in features])
        return batch

    def _loader(self, dataset, batch_size: int, sampler):
        return self.dataloader(dataset, batch_size, sampler, self.collate)

    def train_dataloader(self):
        sampler = self.training_sampler(len(self.train_dataset), self.seed)
        return self._loader(self.train_dataset, self.batch_size, sampler)

    def val_dataloader(self):
        return self._loader(self.val_dataset, self.loader.eval_batch_size, self.evaluation_sampler(self.val_dataset))
