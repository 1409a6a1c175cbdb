"""Writes ``nsp_instances.json``: a few documents of token ids, the parameters, the seed, and the NSP
instances ``bert_exp.data.corpus.instances.create_instances_from_document`` makes from them.

Run from the repository root: ``python tests/data/golden/make_nsp_instances.py``. Regenerate only on
purpose: the file pins today's output, and ``test_instance_spec.py`` fails when it changes.

When the file was made, the instances of the ``original_behaviour`` case (``short_seq_per_document=True``)
were checked equal, token for token and label for label, to those of google-research/bert's
``create_instances_from_document`` (create_pretraining_data.py, commit
d45261273d2dc27e0d25b1cf9e3adb312545a236) given the same documents and a ``random.Random`` with the
same seed, documents visited in order. The original's behaviour, stated: the target length is
max_seq_length - 3, or with probability short_seq_prob a uniform integer in [2, max_seq_length - 3]
drawn once per document; sentences accumulate until the target is reached or the document ends;
segment A takes a uniform 1..n-1 of the n accumulated sentences; the next segment is random (from
another document, from a random sentence on, until it reaches the remaining length) when n == 1 or
with probability 0.5, and the unused sentences are put back; the pair is cut to max_seq_length - 3 one
token at a time from the longer segment (B when equal), at the front or the back with probability 0.5.
The ``default`` case pins our default (the short target drawn again for every instance).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from bert_exp.data.corpus.instances import create_instances_from_document

HERE = Path(__file__).resolve().parent
SEED = 12345
CASES = {
    "original_behaviour": dict(max_seq_length=40, short_seq_prob=0.2, short_seq_per_document=True),
    "default": dict(max_seq_length=40, short_seq_prob=0.2, short_seq_per_document=False),
}


def make_documents() -> list[list[list[int]]]:
    """Six documents of 1-24 sentences, each of 1-18 token ids from a 30522-word vocabulary."""
    rng = np.random.default_rng(2024)
    documents = []
    for num_sentences in (24, 1, 9, 16, 3, 12):
        documents.append([rng.integers(5, 30522, size=int(rng.integers(1, 19))).tolist()
                          for _ in range(num_sentences)])
    return documents


def as_bounds(documents: list[list[list[int]]]) -> tuple[list[int], list[np.ndarray]]:
    """The flat token array and each document's sentence bounds, as the corpus cache holds them."""
    flat, bounds, offset = [], [], 0
    for document in documents:
        lengths = [len(sentence) for sentence in document]
        bounds.append(offset + np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        offset += sum(lengths)
        flat += [token for sentence in document for token in sentence]
    return flat, bounds


def make_instances(documents, seed, max_seq_length, short_seq_prob, short_seq_per_document):
    """Instances as ``[tokens_a, tokens_b, is_random_next]``, documents visited in order, one generator."""
    flat, bounds = as_bounds(documents)
    rng = random.Random(seed)
    instances = []
    for index in range(len(documents)):
        for a0, a_len, b0, b_len, is_random_next in create_instances_from_document(
                bounds, index, max_seq_length, short_seq_prob, rng, short_seq_per_document):
            instances.append([flat[a0:a0 + a_len], flat[b0:b0 + b_len], int(is_random_next)])
    return instances


def main() -> None:
    documents = make_documents()
    golden = {
        "comment": ("NSP instances of bert_exp.data.corpus.instances.create_instances_from_document, made by "
                    "make_nsp_instances.py (its docstring says how); the original_behaviour case was checked "
                    "equal to google-research/bert's create_instances_from_document when made. Each instance "
                    "is [tokens_a, tokens_b, is_random_next]; documents visited in order, one random.Random(seed)."),
        "source": "google-research/bert create_pretraining_data.py @ d45261273d2dc27e0d25b1cf9e3adb312545a236",
        "seed": SEED,
        "documents": documents,
        "cases": {name: {"params": params, "instances": make_instances(documents, SEED, **params)}
                  for name, params in CASES.items()},
    }
    text = json.dumps(golden, separators=(",", ":"))
    # one document / one instance per line keeps diffs readable
    text = text.replace("],[[", "],\n[[").replace("]],[", "]],\n[")
    (HERE / "nsp_instances.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
