import random

import numpy as np

from bert_exp.data.corpus.files import ReadReport
from bert_exp.data.corpus.groups import InstanceSettings, assemble, cut_group, read_group_documents
from bert_exp.data.corpus.instances import create_instances_from_document, pack_full_sentences
from bert_exp.data.corpus.streaming import to_sample
from bert_exp.data.corpus.text import document_sentences, iter_text_chunks
from bert_exp.data.tokenizer import train_wordpiece


def synthetic_documents(num_docs, sentences_per_doc, max_len, seed=0, min_len=1):
    """Documents as sentence bounds over a flat array whose token at offset k is k."""
    rng = np.random.default_rng(seed)
    documents, offset = [], 0
    for _ in range(num_docs):
        lengths = rng.integers(min_len, max_len + 1, size=rng.integers(1, sentences_per_doc + 1))
        bounds = offset + np.concatenate([[0], np.cumsum(lengths)])
        documents.append(bounds)
        offset = int(bounds[-1])
    return documents


def nsp_instances(documents, max_seq_length=128, short_seq_prob=0.1, seed=0):
    rng = random.Random(seed)
    return [inst for i in range(len(documents))
            for inst in create_instances_from_document(documents, i, max_seq_length, short_seq_prob, rng)]


def test_short_seq_prob_is_respected():
    # long documents of 5-token sentences: a full instance has exactly max_num_tokens tokens
    documents = synthetic_documents(20, 4000, 5, min_len=5, seed=4)
    for prob in (0.0, 0.1, 0.3):
        instances = nsp_instances(documents, short_seq_prob=prob)
        lengths = np.array([a + b for _, a, _, b, _ in instances])
        assert lengths.max() <= 125
        short = np.mean(lengths < 125 - 5)
        assert abs(short - prob * 0.95) < 0.02, (prob, short)


def check_nsp_instances(instances, doc_starts, sentence_starts, max_seq_length):
    instances = np.asarray(instances)
    labels = instances[:, 4]
    assert abs(labels.mean() - 0.5) < 0.03, labels.mean()
    assert np.all(instances[:, 1] + instances[:, 3] + 3 <= max_seq_length)
    assert np.all(instances[:, 1] >= 1) and np.all(instances[:, 3] >= 1)
    doc_a = np.searchsorted(doc_starts, instances[:, 0], side="right")
    doc_b = np.searchsorted(doc_starts, instances[:, 2], side="right")
    a_end = instances[:, 0] + instances[:, 1]
    is_next = labels == 0
    assert np.all(doc_a[~is_next] != doc_b[~is_next]), "a NotNext B comes from the same document"
    assert np.all(doc_a[is_next] == doc_b[is_next]), "an IsNext B comes from another document"
    assert np.all(instances[is_next, 2] >= a_end[is_next])
    # A and B of an IsNext pair meet at a sentence boundary (only truncated tokens between them)
    first_boundary = sentence_starts[np.searchsorted(sentence_starts, a_end[is_next], side="left")]
    assert np.all(first_boundary <= instances[is_next, 2])


def test_nsp_properties_on_synthetic_documents():
    documents = synthetic_documents(200, 80, 40, seed=5)
    instances = nsp_instances(documents)
    doc_starts = np.array([d[0] for d in documents])
    sentence_starts = np.unique(np.concatenate(documents))
    check_nsp_instances(instances, doc_starts, sentence_starts, 128)


def test_nsp_properties_on_the_shared_corpus(data_dir, tmp_path):
    """The invariants on real text, as the preparation cuts a group: what it stores decodes to
    [CLS] A [SEP] B [SEP] with token types 0 / 1, instance for instance."""
    files = sorted((data_dir / "corpus" / "state_union").glob("*.txt")) + \
        sorted((data_dir / "corpus" / "inaugural").glob("*.txt"))
    tokenizer = train_wordpiece(lambda: iter_text_chunks(files), vocab_size=4000)
    settings = InstanceSettings(max_seq_length=128, val_fraction=0.0)
    cut = cut_group(files, tokenizer, settings, 0, "train")
    instances = cut.instances
    assert len(instances) > 3000
    doc_starts = cut.doc_starts[:-1]
    # sentence starts: re-derive from the tokenised sentences
    lengths = [len(e.ids) for _, text in read_group_documents(files, settings, ReadReport())
               for e in tokenizer.encode_batch(document_sentences(text), add_special_tokens=False) if e.ids]
    sentence_starts = np.concatenate([[0], np.cumsum(lengths)])
    check_nsp_instances(instances, doc_starts, sentence_starts, 128)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    for k in (0, 7, len(instances) - 1):
        ids, b_start, label = assemble(cut.tokens, cut.doc_starts, instances[k], cls_id, sep_id)
        _, a_len, _, b_len, expected = instances[k]
        assert len(ids) == a_len + b_len + 3 and ids[0] == cls_id and ids[a_len + 1] == sep_id and ids[-1] == sep_id
        assert b_start == a_len + 2 and label == expected
        sample = to_sample({"input_ids": ids, "info": np.array([k, b_start, label])}, mask_seed=1, epoch=1)
        assert sample["token_type_ids"].tolist() == [0] * (a_len + 2) + [1] * (b_len + 1)
        assert sample["next_sentence_label"] == label


def test_one_group_cuts_what_the_whole_corpus_did(data_dir):
    """A corpus of one group gives the instances of the original algorithm run over the whole corpus: the
    documents in reading order, ``random.Random(seed)`` shuffling them to hold out the validation ones,
    then every validation document's instances, then every training document's, from that generator."""
    files = sorted((data_dir / "corpus" / "inaugural").glob("18*.txt"))
    tokenizer = train_wordpiece(lambda: iter_text_chunks(files), vocab_size=3000)
    settings = InstanceSettings(max_seq_length=64, val_fraction=0.1, seed=7)
    pieces, documents, offset = [], [], 0
    for _, text in read_group_documents(files, settings, ReadReport()):
        ids = [e.ids for e in tokenizer.encode_batch(document_sentences(text), add_special_tokens=False) if e.ids]
        documents.append(offset + np.concatenate([[0], np.cumsum([len(x) for x in ids])]))
        pieces.extend(ids)
        offset = int(documents[-1][-1])
    tokens = np.concatenate(pieces)
    rng = random.Random(7)
    order = list(range(len(documents)))
    rng.shuffle(order)
    held = sorted(order[: max(2, round(0.1 * len(documents)))])
    expected = {}
    for split, numbers in (("val", held), ("train", [d for d in range(len(documents)) if d not in held])):
        docs = [documents[d] for d in numbers]
        made = [inst for i in range(len(docs)) for inst in create_instances_from_document(docs, i, 64, 0.1, rng)]
        expected[split] = _contents(tokens, made)
    for split in ("val", "train"):
        cut = cut_group(files, tokenizer, settings, 0, split)
        assert _contents(cut.tokens, cut.instances) == expected[split], split
        assert len(expected[split]) > 20


def _contents(tokens, instances):
    """Each instance as (A's tokens, B's tokens, label): what it holds, wherever its tokens are stored."""
    return [(tuple(tokens[a : a + na]), tuple(tokens[b : b + nb]), int(label)) for a, na, b, nb, label in instances]


def test_full_sentences_packing_crosses_documents_with_a_separator(tmp_path):
    documents = synthetic_documents(30, 20, 20, seed=6)
    instances = pack_full_sentences(documents, 64)
    starts = [i[0] for i in instances]
    ends = [i[0] + i[1] for i in instances]
    total = int(documents[-1][-1])
    assert starts[0] == 0 and ends[-1] == total and starts[1:] == ends[:-1]  # every token, in order, once
    doc_starts = np.array([int(d[0]) for d in documents])
    for lo, length, *_ in instances:
        inner = np.sum((doc_starts > lo) & (doc_starts < lo + length))
        assert length + inner <= 62
    # assembling an instance inserts the [SEP]s
    tokens = np.arange(total, dtype=np.int32) % 1000 + 10
    crossing = next(k for k, (lo, n, *_) in enumerate(instances) if np.any((doc_starts > lo) & (doc_starts < lo + n)))
    ids, b_start, label = assemble(tokens, np.array([*doc_starts, total]), instances[crossing], cls_id=2, sep_id=3)
    sample = to_sample({"input_ids": ids, "info": np.array([crossing, b_start, label])}, mask_seed=0, epoch=1)
    assert sample["input_ids"][0] == 2 and sample["input_ids"][-1] == 3
    assert np.sum(sample["input_ids"] == 3) >= 2 and len(sample["input_ids"]) <= 64
    assert sample["next_sentence_label"] == -100 and not sample["token_type_ids"].any()
