"""Pre-training instances, following google-research/bert ``create_pretraining_data.py``.

The corpus is one flat token array; a document is the array of its sentence boundaries (global token
offsets, ``len = sentences + 1``). An instance is five integers ``(a_start, a_len, b_start, b_len,
is_random_next)`` pointing into the flat array, so the cache never copies tokens. The algorithm is the
original's step for step, consuming the random generator identically (``tests/data/`` states the
behaviour as invariants and pins golden instances that equalled the original's when made), with two
documented options:

* ``short_seq_per_document``: the original draws the short target length once per *document*, which
  suits many short documents (Wikipedia articles); with book-length documents that makes whole books
  short, so by default we draw it again for every instance. ``True`` restores the original.
* the random next segment comes from another document: the original tries 10 random draws and would
  keep its own document if all 10 failed; we then draw among the others instead.
"""

from __future__ import annotations

import random

import numpy as np

Instance = tuple[int, int, int, int, int]  # a_start, a_len, b_start, b_len, is_random_next (-1: no NSP)


def truncate_seq_pair(a: list[int], b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """Trims spans ``a`` and ``b`` (``[lo, hi]``, in place) to ``max_num_tokens`` in total, one token
    at a time from the longer one, at its front or back with equal probability."""
    while (a[1] - a[0]) + (b[1] - b[0]) > max_num_tokens:
        trunc = a if (a[1] - a[0]) > (b[1] - b[0]) else b
        assert trunc[1] - trunc[0] >= 1
        if rng.random() < 0.5:
            trunc[0] += 1
        else:
            trunc[1] -= 1


def _other_document(num_documents: int, document_index: int, rng: random.Random) -> int:
    for _ in range(10):
        index = rng.randint(0, num_documents - 1)
        if index != document_index:
            return index
    index = rng.randint(0, num_documents - 2)
    return index + 1 if index >= document_index else index


def draw_target_length(rng: random.Random, short_seq_prob: float, max_num_tokens: int) -> int:
    """The original's target: the full length, or with ``short_seq_prob`` a random one in [2, max]."""
    if rng.random() < short_seq_prob:
        return rng.randint(2, max_num_tokens)
    return max_num_tokens


def create_instances_from_document(
    documents: list[np.ndarray],
    document_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    rng: random.Random,
    short_seq_per_document: bool = False,
) -> list[Instance]:
    bounds = documents[document_index]
    num_sentences = len(bounds) - 1
    max_num_tokens = max_seq_length - 3  # [CLS], [SEP], [SEP]

    target_seq_length = draw_target_length(rng, short_seq_prob, max_num_tokens)
    instances: list[Instance] = []
    chunk_start, current_length, i = 0, 0, 0
    while i < num_sentences:
        current_length += int(bounds[i + 1] - bounds[i])
        if i == num_sentences - 1 or current_length >= target_seq_length:
            chunk_len = i - chunk_start + 1
            a_end = rng.randint(1, chunk_len - 1) if chunk_len >= 2 else 1  # sentences in A
            a = [int(bounds[chunk_start]), int(bounds[chunk_start + a_end])]
            if chunk_len == 1 or rng.random() < 0.5:
                is_random_next = 1
                target_b_length = target_seq_length - (a[1] - a[0])
                other = documents[_other_document(len(documents), document_index, rng)]
                j = rng.randint(0, len(other) - 2)
                b = [int(other[j]), int(other[j + 1])]
                while b[1] - b[0] < target_b_length and j + 2 < len(other):
                    j += 1
                    b[1] = int(other[j + 1])
                i -= chunk_len - a_end  # the unused sentences of this chunk are put back
            else:
                is_random_next = 0
                b = [a[1], int(bounds[i + 1])]
            truncate_seq_pair(a, b, max_num_tokens, rng)
            assert a[1] > a[0] and b[1] > b[0]
            instances.append((a[0], a[1] - a[0], b[0], b[1] - b[0], is_random_next))
            chunk_start, current_length = i + 1, 0
            if not short_seq_per_document:
                target_seq_length = draw_target_length(rng, short_seq_prob, max_num_tokens)
        i += 1
    return instances


def pack_full_sentences(documents: list[np.ndarray], max_seq_length: int) -> list[Instance]:
    """MLM-only instances as RoBERTa's FULL-SENTENCES: whole sentences packed contiguously up to
    ``max_seq_length - 2`` tokens, crossing document boundaries, where the dataset inserts an extra
    [SEP] (counted here). A sentence longer than that is cut into pieces. Only adjacent documents share
    an instance: where the next document does not start at the previous one's end (a document of the
    other split lies between), the instance ends, so it never holds tokens of documents it was not given."""
    capacity = max_seq_length - 2  # [CLS] ... [SEP]
    instances: list[Instance] = []
    start, end, used = None, 0, 0
    for bounds in documents:
        if start is not None and int(bounds[0]) != end:
            instances.append((start, end - start, 0, 0, -1))
            start, used = None, 0
        for k in range(len(bounds) - 1):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            separator = 1 if (start is not None and k == 0) else 0
            if start is not None and used + separator + (hi - lo) > capacity:
                instances.append((start, end - start, 0, 0, -1))
                start, used, separator = None, 0, 0
            while hi - lo > capacity:  # only a sentence alone can exceed it
                instances.append((lo, capacity, 0, 0, -1))
                lo += capacity
            if start is None:
                start = lo
            used += separator + (hi - lo)
            end = hi
    if start is not None:
        instances.append((start, end - start, 0, 0, -1))
    return instances


def pack_token_blocks(documents: list[np.ndarray], max_seq_length: int) -> list[Instance]:
    """MLM-only instances that are blocks of the running text: every instance holds
    ``max_seq_length - 2`` positions (the extra [SEP] the dataset inserts between adjacent documents
    counted), cut wherever the count falls, mid-sentence included: transformers' ``run_mlm.py`` groups
    its texts into blocks the same way (it drops the remainder and puts no [SEP] between texts). Shorter
    blocks: the last of a run of adjacent documents, and one that ends with a document when a single
    position is left (a [SEP] alone would fill it). With sentences of IMDB reviews, full sentences fill
    79 % of 64 positions, these blocks 99.8 %. Instances never hold tokens of documents they were not given."""
    capacity = max_seq_length - 2
    instances: list[Instance] = []
    start, end, used = None, 0, 0
    for bounds in documents:
        lo, hi = int(bounds[0]), int(bounds[-1])
        if start is not None and (lo != end or used + 2 > capacity):  # not adjacent, or no room past a [SEP]
            instances.append((start, end - start, 0, 0, -1))
            start = None
        if start is not None:
            used += 1  # the [SEP] at this document's start
        while lo < hi:
            if start is None:
                start, used = lo, 0
            take = min(capacity - used, hi - lo)
            lo, used, end = lo + take, used + take, lo + take
            if used == capacity:
                instances.append((start, end - start, 0, 0, -1))
                start = None
    if start is not None:
        instances.append((start, end - start, 0, 0, -1))
    return instances


def pack_doc_sentences(documents: list[np.ndarray], max_seq_length: int) -> list[Instance]:
    """MLM-only instances as RoBERTa's DOC-SENTENCES: whole sentences packed contiguously up to
    ``max_seq_length - 2`` tokens, never crossing a document boundary (an instance ends with its
    document, and may be shorter). A sentence longer than that is cut into pieces."""
    instances: list[Instance] = []
    for bounds in documents:
        instances += pack_full_sentences([bounds], max_seq_length)
    return instances


def create_sentence_pairs_from_document(
    documents: list[np.ndarray],
    document_index: int,
    max_seq_length: int,
    rng: random.Random,
) -> list[Instance]:
    """RoBERTa's SENTENCE-PAIR format: each instance is a pair of natural sentences, the actual next
    sentence of the document or (half the time, and always for a document's last sentence) a random
    sentence of another document; ``is_random_next`` says which. A sentence used as the actual next one
    is consumed with its predecessor. Pairs longer than ``max_seq_length - 3`` are cut by
    :func:`truncate_seq_pair`."""
    bounds = documents[document_index]
    num_sentences = len(bounds) - 1
    max_num_tokens = max_seq_length - 3
    instances: list[Instance] = []
    i = 0
    while i < num_sentences:
        a = [int(bounds[i]), int(bounds[i + 1])]
        if i == num_sentences - 1 or rng.random() < 0.5:
            is_random_next = 1
            other = documents[_other_document(len(documents), document_index, rng)]
            j = rng.randint(0, len(other) - 2)
            b = [int(other[j]), int(other[j + 1])]
            i += 1
        else:
            is_random_next = 0
            b = [int(bounds[i + 1]), int(bounds[i + 2])]
            i += 2
        truncate_seq_pair(a, b, max_num_tokens, rng)
        instances.append((a[0], a[1] - a[0], b[0], b[1] - b[0], is_random_next))
    return instances


def create_sop_instances_from_document(
    documents: list[np.ndarray],
    document_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    rng: random.Random,
    short_seq_per_document: bool = False,
) -> list[Instance]:
    """ALBERT's sentence-order prediction: BERT's chunks of sentences up to a target length, split into
    two consecutive segments of the same document (A before B), swapped half the time; the label is 1
    when swapped. Unlike ALBERT's code, a chunk of a single sentence is split inside the sentence at a
    random token (ALBERT pairs it with a random segment of another document, which is NSP's task, not
    order); a one-token chunk (a document's last, one-token sentence) makes no instance."""
    bounds = documents[document_index]
    num_sentences = len(bounds) - 1
    max_num_tokens = max_seq_length - 3

    target_seq_length = draw_target_length(rng, short_seq_prob, max_num_tokens)
    instances: list[Instance] = []
    chunk_start, current_length, i = 0, 0, 0
    while i < num_sentences:
        current_length += int(bounds[i + 1] - bounds[i])
        if i == num_sentences - 1 or current_length >= target_seq_length:
            chunk_len = i - chunk_start + 1
            lo, hi = int(bounds[chunk_start]), int(bounds[i + 1])
            if chunk_len >= 2:
                cut = int(bounds[chunk_start + rng.randint(1, chunk_len - 1)])
            else:
                cut = rng.randint(lo + 1, hi - 1) if hi - lo >= 2 else None
            if cut is not None:
                a, b = [lo, cut], [cut, hi]
                truncate_seq_pair(a, b, max_num_tokens, rng)
                swapped = int(rng.random() < 0.5)
                if swapped:
                    a, b = b, a
                instances.append((a[0], a[1] - a[0], b[0], b[1] - b[0], swapped))
            chunk_start, current_length = i + 1, 0
            if not short_seq_per_document:
                target_seq_length = draw_target_length(rng, short_seq_prob, max_num_tokens)
        i += 1
    return instances
