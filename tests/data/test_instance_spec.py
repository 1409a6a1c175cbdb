"""The specification of NSP instance creation (``bert_exp.data.corpus.instances``), as invariants checked on
real-ish text over many seeds, and as golden instances stored in ``golden/nsp_instances.json``.

The behaviour is that of google-research/bert ``create_pretraining_data.py`` (commit
d45261273d2dc27e0d25b1cf9e3adb312545a236): target length max_seq_length - 3, or with probability
short_seq_prob a uniform one in [2, max_seq_length - 3]; sentences accumulate until the target is
reached or the document ends; segment A takes 1..n-1 of the n accumulated sentences; B is the rest
(label "is next") or, with probability 0.5 or when n == 1, a run of sentences from another document
(label "random next") while the unused sentences are put back; the pair is cut to max_seq_length - 3
one token at a time from the longer segment, at its front or back at random.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from bert_exp.data.corpus.instances import create_instances_from_document, truncate_seq_pair

GOLDEN = Path(__file__).resolve().parent / "golden" / "nsp_instances.json"

TEXT = """
The river rose for three days before anyone in the valley thought to move the cattle. By the fourth
morning the low fields were a brown lake. Old Marta said she had seen worse, though nobody could
remember when. The school closed and the children were sent to help carry sacks of grain up to the
church. In the evening the rain stopped. The water began to fall slowly, leaving a line of mud on
every wall.

A compiler translates a program written in one language into another. Most compilers work in
phases. The front end reads the source text and builds a tree. The middle end improves the program
without changing what it computes. The back end chooses machine instructions and assigns registers.
Errors found early are cheaper to report well.

She bought the violin in a shop near the station. It was older than the shop, the owner said. For a
month she played only scales. Then she tried the slow movement of a sonata her teacher loved. The
neighbours knocked on the wall twice. After that they stopped knocking, and once someone clapped.

Bread needs flour, water, salt and time. Yeast eats the sugars in the flour and makes gas. The gas
is trapped by gluten, which gives the dough its stretch. A long cold rise gives more flavour. Bake
it hot at first, then lower the heat. Let it cool before cutting, however hard that is.

The committee met on Tuesday to discuss the budget. Several members asked why the road repairs had
cost twice the estimate. The treasurer explained that the contractor had found old pipes under the
surface. A vote was postponed. The chair promised a written report by the end of the month.

Comets are lumps of ice and dust from the outer solar system. When one comes near the sun its ice
turns to gas. The gas and dust form a bright head and a long tail. The tail always points away from
the sun. Some comets return every few years; others are seen only once.

On the last day of the trip we climbed to the lighthouse. The stairs were narrow and turned so many
times that we lost count. At the top the wind was strong enough to lean on. Far below, a fishing
boat was coming home. Nobody spoke for a while.
"""


def tokenized_documents() -> list[list[list[int]]]:
    """The paragraphs of TEXT as documents of sentences of word and punctuation ids."""
    vocab: dict[str, int] = {}
    documents = []
    for paragraph in TEXT.strip().split("\n\n"):
        sentences = re.split(r"(?<=[.;])\s+", " ".join(paragraph.split()))
        documents.append([[vocab.setdefault(word, len(vocab) + 5) for word in re.findall(r"\w+|[^\w\s]", s)]
                          for s in sentences])
    return documents


def as_bounds(documents):
    """The flat token array and each document's sentence bounds (the corpus cache's layout)."""
    flat = np.array([t for document in documents for sentence in document for t in sentence])
    bounds, offset = [], 0
    for document in documents:
        lengths = [len(sentence) for sentence in document]
        bounds.append(offset + np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        offset += sum(lengths)
    return flat, bounds


def make(bounds, seed, max_seq_length, short_seq_prob=0.0, **kwargs):
    """Instances of every document in order, as (a_start, a_len, b_start, b_len, is_random_next, document)."""
    rng = random.Random(seed)
    return [(*instance, index) for index in range(len(bounds))
            for instance in create_instances_from_document(bounds, index, max_seq_length, short_seq_prob, rng, **kwargs)]


def document_of(bounds, position):
    starts = np.array([int(b[0]) for b in bounds])
    return int(np.searchsorted(starts, position, side="right") - 1)


DOCUMENTS = tokenized_documents()
FLAT, BOUNDS = as_bounds(DOCUMENTS)
SENTENCE_STARTS = set(int(x) for b in BOUNDS for x in b)


def test_the_text_is_varied_enough():
    lengths = [len(s) for d in DOCUMENTS for s in d]
    assert len(DOCUMENTS) == 7 and len(lengths) >= 40 and min(lengths) < 8 and max(lengths) > 18


@pytest.mark.parametrize("max_seq_length", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("short_seq_prob", [0.0, 0.1, 0.5])
def test_pairs_are_well_formed(max_seq_length, short_seq_prob):
    for seed in range(40):
        for a0, a_len, b0, b_len, is_random, index in make(BOUNDS, seed, max_seq_length, short_seq_prob):
            assert a_len >= 1 and b_len >= 1, "a segment is empty"
            assert a_len + b_len <= max_seq_length - 3
            assert document_of(BOUNDS, a0) == index == document_of(BOUNDS, a0 + a_len - 1)
            doc_b = document_of(BOUNDS, b0)
            assert doc_b == document_of(BOUNDS, b0 + b_len - 1), "B spans two documents"
            if is_random:
                assert doc_b != index, "a random next segment from the same document"
            else:
                assert doc_b == index and b0 >= a0 + a_len
                # A and B meet at a sentence boundary; only truncated tokens lie between them
                assert any(a0 + a_len <= s <= b0 for s in SENTENCE_STARTS)


def test_without_truncation_the_consumed_sentences_tile_each_document():
    """With room for any two documents, nothing is cut: A is the first k of the n sentences accumulated
    (1 <= k <= n-1; the whole document, here), B the rest when "is next"; a random next B runs from a
    sentence of another document to its end, and the sentences A left unused are put back, so the next
    instance starts right after A."""
    longest = max(sum(map(len, d)) for d in DOCUMENTS)
    max_seq_length = 2 * longest + 3
    first_a_sentences = {}
    for seed in range(200):
        by_document: dict[int, list] = {}
        for instance in make(BOUNDS, seed, max_seq_length):
            by_document.setdefault(instance[5], []).append(instance)
        assert sorted(by_document) == list(range(len(DOCUMENTS)))
        for index, instances in by_document.items():
            bounds = [int(x) for x in BOUNDS[index]]
            position = bounds[0]
            for k, (a0, a_len, b0, b_len, is_random, _) in enumerate(instances):
                assert a0 == position and a0 + a_len in bounds, "A is not whole sentences from where we are"
                if is_random:
                    other = [int(x) for x in BOUNDS[document_of(BOUNDS, b0)]]
                    assert b0 in other and b0 + b_len == other[-1]
                    position = a0 + a_len
                else:
                    assert b0 == a0 + a_len and b0 + b_len == bounds[-1]
                    position = bounds[-1]
                if k == 0:
                    first_a_sentences.setdefault(index, set()).add(bounds.index(a0 + a_len))
            assert position == bounds[-1], "a sentence is lost or used twice"
    for index, counts in first_a_sentences.items():
        n = len(DOCUMENTS[index])
        assert counts == set(range(1, n)), (index, counts)  # every split 1..n-1 happens, no other


def test_the_target_length_and_short_sequences():
    """On documents of one-token sentences an instance stops exactly at its target (unless the document
    runs out): max_seq_length - 3, or with probability short_seq_prob uniform in [2, max_seq_length - 3]."""
    max_seq_length, prob = 64, 0.2
    ones = [[[t] for t in range(n * 1000, n * 1000 + 600)] for n in range(6)]
    _, bounds = as_bounds(ones)
    lengths = []
    for seed in range(40):
        instances = make(bounds, seed, max_seq_length, prob)
        for a0, a_len, b0, b_len, is_random, index in instances:
            end = max(a0 + a_len, b0 + b_len) if not is_random else a0 + a_len
            if end < int(bounds[index][-1]) - 1 and (not is_random or b0 + b_len < int(bounds[document_of(bounds, b0)][-1])):
                lengths.append(a_len + b_len)
    lengths = np.array(lengths)
    assert len(lengths) > 3000 and lengths.max() == max_seq_length - 3
    short = lengths[lengths < max_seq_length - 3]
    assert abs(len(short) / len(lengths) - prob * (1 - 1 / 60)) < 0.025
    assert short.min() == 2
    assert abs(short.mean() - (2 + 60) / 2) < 2  # uniform over [2, 60]
    # the original draws one target per document: every "is next" pair inside a document is as long
    per_document = {}
    for a0, a_len, b0, b_len, is_random, index in make(bounds, 3, max_seq_length, 0.5, short_seq_per_document=True):
        if not is_random and b0 + b_len < int(bounds[index][-1]):
            per_document.setdefault(index, set()).add(a_len + b_len)
    assert all(len(values) == 1 for values in per_document.values()), per_document
    assert any(values != {max_seq_length - 3} for values in per_document.values())


def test_truncation_cuts_the_longer_segment_at_either_end():
    ends = set()
    for seed in range(200):
        rng = random.Random(seed)
        a, b = [0, 12], [100, 104]
        truncate_seq_pair(a, b, 10, rng)
        assert b == [100, 104] and a[1] - a[0] == 6 and 0 <= a[0] and a[1] <= 12
        ends.add(a[0])
        a, b = [0, 9], [100, 108]  # longer A, then both, then equal: B is cut when equal
        truncate_seq_pair(a, b, 10, rng)
        assert (a[1] - a[0], b[1] - b[0]) == (5, 5)
        a, b = [0, 5], [100, 105]
        truncate_seq_pair(a, b, 9, rng)
        assert a == [0, 5] and b[1] - b[0] == 4
    assert ends == set(range(7)), "front and back cuts are not both random"


def test_random_next_is_about_half():
    """Half the pairs with two or more sentences get a random B. A one-sentence chunk always does, and a
    random B puts sentences back, so document ends add a few; on long documents that is ~1 %."""
    sentences = [s for d in DOCUMENTS for s in d]
    long_documents = [(sentences[7 * k:] + sentences[:7 * k]) * 8 for k in range(3)]
    _, bounds = as_bounds(long_documents)
    labels = np.array([i[4] for seed in range(40) for i in make(bounds, seed, 64, 0.1)])
    assert len(labels) > 8000
    assert abs(labels.mean() - 0.5) < 0.03, labels.mean()


def test_a_seed_determines_the_instances():
    for seed in range(5):
        assert make(BOUNDS, seed, 48, 0.1) == make(BOUNDS, seed, 48, 0.1)
    assert len({tuple(make(BOUNDS, seed, 48, 0.1)) for seed in range(5)}) == 5


@pytest.mark.parametrize("case", ["original_behaviour", "default"])
def test_golden_instances(case):
    """Instances as they were made when the golden file was written; the ``original_behaviour`` case
    was then equal to google-research/bert's (see golden/make_nsp_instances.py)."""
    golden = json.loads(GOLDEN.read_text())
    params = golden["cases"][case]["params"]
    flat, bounds = as_bounds(golden["documents"])
    ours = [[flat[a0:a0 + a_len].tolist(), flat[b0:b0 + b_len].tolist(), is_random]
            for a0, a_len, b0, b_len, is_random, _ in make(bounds, golden["seed"], **params)]
    assert ours == golden["cases"][case]["instances"]
