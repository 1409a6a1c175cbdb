"""The instances and batches of each pre-training objective, on hand-made documents."""

import random

import numpy as np
import pytest
import torch

from bert_exp.data.corpus.groups import InstanceSettings, assemble, cut_group, instance_layout
from bert_exp.data.corpus.streaming import to_sample
from bert_exp.data.corpus.instances import (
    create_sentence_pairs_from_document,
    create_sop_instances_from_document,
    pack_doc_sentences,
    pack_full_sentences,
    pack_token_blocks,
)
from bert_exp.data.corpus.masking import CausalLMCollator
from bert_exp.data.tokenizer import SpecialIds, train_wordpiece


def documents_of(lengths_per_doc):
    """Sentence bounds over a flat array whose token at offset k is k."""
    documents, offset = [], 0
    for lengths in lengths_per_doc:
        bounds = offset + np.concatenate([[0], np.cumsum(lengths)])
        documents.append(bounds)
        offset = int(bounds[-1])
    return documents


def random_documents(num_docs, seed=0, max_sentences=30, max_len=25):
    rng = np.random.default_rng(seed)
    return documents_of([rng.integers(1, max_len + 1, size=rng.integers(1, max_sentences + 1))
                         for _ in range(num_docs)])


def doc_of(documents, offsets):
    starts = np.array([d[0] for d in documents])
    return np.searchsorted(starts, np.asarray(offsets), side="right") - 1


def test_doc_sentences_never_cross_a_document_boundary_and_full_sentences_do():
    documents = random_documents(40, seed=1)
    for packer, crosses in ((pack_doc_sentences, False), (pack_full_sentences, True)):
        instances = np.asarray(packer(documents, 64))
        first, last = doc_of(documents, instances[:, 0]), doc_of(documents, instances[:, 0] + instances[:, 1] - 1)
        assert bool(np.any(first != last)) is crosses
        assert np.all(instances[:, 1] <= 62) and np.all(instances[:, 4] == -1)
    # doc_sentences holds every token once, in order
    instances = np.asarray(pack_doc_sentences(documents, 64))
    covered = np.concatenate([np.arange(s, s + n) for s, n in instances[:, :2]])
    assert np.array_equal(covered, np.arange(int(documents[-1][-1])))


def test_doc_sentences_packs_whole_sentences_up_to_the_length():
    documents = documents_of([[3, 3, 3], [4, 4]])
    # capacity 8 - 2 = 6: [3, 3] | [3] (document ends) | [4] [4] would be 8 > 6: [4] | [4]
    assert pack_doc_sentences(documents, 8) == [(0, 6, 0, 0, -1), (6, 3, 0, 0, -1), (9, 4, 0, 0, -1),
                                                 (13, 4, 0, 0, -1)]


def test_sop_segments_are_consecutive_and_the_label_says_swapped():
    documents = random_documents(60, seed=2)
    rng = random.Random(0)
    instances = np.asarray([inst for i in range(len(documents))
                            for inst in create_sop_instances_from_document(documents, i, 64, 0.1, rng)])
    a_start, a_len, b_start, b_len, label = instances.T
    assert abs(label.mean() - 0.5) < 0.05
    assert np.all(a_len >= 1) and np.all(b_len >= 1) and np.all(a_len + b_len <= 61)
    # both segments from one document, always
    assert np.array_equal(doc_of(documents, a_start), doc_of(documents, b_start))
    # not swapped: A comes before B; swapped: B (the earlier segment) before A
    in_order = a_start + a_len <= b_start
    assert np.array_equal(in_order, label == 0)
    assert np.all(b_start[label == 1] + b_len[label == 1] <= a_start[label == 1])


def test_sop_on_a_hand_made_document():
    documents = documents_of([[2, 2, 2, 2], [5]])
    rng = random.Random(3)
    instances = create_sop_instances_from_document(documents, 0, 128, 0.0, rng)
    assert len(instances) == 1
    a_start, a_len, b_start, b_len, swapped = instances[0]
    first, second = ((b_start, b_len), (a_start, a_len)) if swapped else ((a_start, a_len), (b_start, b_len))
    assert first[0] == 0 and first[0] + first[1] == second[0] and second[0] + second[1] == 8
    # a document of one sentence is split inside it, never paired with another document
    single = create_sop_instances_from_document(documents, 1, 128, 0.0, rng)
    (a_start, a_len, b_start, b_len, _), = single
    assert {a_start, b_start} <= set(range(8, 13)) and a_len + b_len == 5


def test_sentence_pairs_are_single_sentences():
    documents = random_documents(50, seed=3)
    sentence_starts = set(int(x) for d in documents for x in d[:-1])
    rng = random.Random(0)
    instances = np.asarray([inst for i in range(len(documents))
                            for inst in create_sentence_pairs_from_document(documents, i, 128, rng)])
    a_start, a_len, b_start, b_len, label = instances.T
    assert set(a_start.tolist()) <= sentence_starts and set(b_start.tolist()) <= sentence_starts  # no truncation at 128
    same = doc_of(documents, a_start) == doc_of(documents, b_start)
    assert np.array_equal(same, label == 0)
    assert np.all(b_start[label == 0] == a_start[label == 0] + a_len[label == 0])  # the actual next sentence


def test_instance_layouts_and_mistakes():
    assert instance_layout() == (True, None)  # BERT, as before objectives
    assert instance_layout("mlm_nsp", None, nsp=False) == (False, None)  # the older data.nsp=false
    assert instance_layout("mlm") == (False, None)
    assert instance_layout("mlm", "doc_sentences") == (False, "doc_sentences")
    assert instance_layout("mlm", "segment_pair") == (True, None)
    assert instance_layout("mlm", "sentence_pair") == (True, "sentence_pair")
    assert instance_layout("mlm_sop", "segment_pair") == (True, "sop")
    assert instance_layout("clm") == (False, None)
    with pytest.raises(ValueError, match="objective=clm"):
        instance_layout("clm", "segment_pair")
    with pytest.raises(ValueError, match="objective=mlm_sop trains on segment pairs"):
        instance_layout("mlm_sop", "full_sentences")
    with pytest.raises(ValueError, match="data.packing='full'"):
        instance_layout("mlm", "full")
    with pytest.raises(ValueError, match="older spelling of objective=mlm"):
        instance_layout("clm", None, nsp=False)


def test_causal_lm_batches_label_every_token_and_ignore_padding():
    special = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=50)
    samples = [{"input_ids": np.array([2, 10, 11, 12, 3]), "token_type_ids": np.zeros(5, int), "next_sentence_label": -100},
               {"input_ids": np.array([2, 20, 3]), "token_type_ids": np.zeros(3, int), "next_sentence_label": -100}]
    batch = CausalLMCollator(special)(samples)
    assert torch.equal(batch["input_ids"], torch.tensor([[2, 10, 11, 12, 3], [2, 20, 3, 0, 0]]))  # nothing masked
    assert torch.equal(batch["labels"], torch.tensor([[2, 10, 11, 12, 3], [2, 20, 3, -100, -100]]))
    assert "masked_lm_positions" not in batch


@pytest.mark.parametrize("layout", ["sop", "sentence_pair", "doc_sentences", "token_blocks"])
def test_the_cache_builds_each_layout(tmp_path, layout):
    text = "\n\n".join(" ".join(f"Sentence {d} {i} has some words in it." for i in range(30)) for d in range(6))
    files = []
    for d, doc in enumerate(text.split("\n\n")):
        files.append(tmp_path / f"doc{d}.txt")
        files[-1].write_text(doc)
    tokenizer = train_wordpiece([text], 200, 1, 100, True, None)
    nsp = layout not in ("doc_sentences", "token_blocks")
    # 31 for the blocks: the documents are a multiple of 30 tokens long, so blocks of 30 would never
    # hold a document start
    length = 31 if layout == "token_blocks" else 32
    cut = cut_group(files, tokenizer, InstanceSettings(max_seq_length=length, nsp=nsp, layout=layout, val_fraction=0.0),
                    0, "train")
    samples = []
    for k, instance in enumerate(cut.instances):
        ids, b_start, label = assemble(cut.tokens, cut.doc_starts, instance, cls_id=2, sep_id=3)
        samples.append(to_sample({"input_ids": ids, "info": np.array([k, b_start, label])}, mask_seed=0, epoch=1))
    assert samples and all(len(s["input_ids"]) <= length for s in samples)
    if layout == "doc_sentences":
        assert all((s["input_ids"] == 3).sum() == 1 for s in samples)  # no [SEP] between documents inside
    elif layout == "token_blocks":  # one run of six adjacent documents: full blocks, the [SEP]s inside counted
        lengths = [len(s["input_ids"]) for s in samples]
        assert all(n in (30, 31) for n in lengths[:-1]) and lengths.count(31) >= len(lengths) - 6
        # a [SEP] where a document starts inside a block (not where one starts a block)
        assert 1 <= sum((s["input_ids"] == 3).sum() - 1 for s in samples) <= 5
        assert all(s["next_sentence_label"] == -100 and s["input_ids"][0] == 2 for s in samples)
    else:
        assert {s["next_sentence_label"] for s in samples} == {0, 1}


def test_full_sentences_never_span_documents_they_were_not_given():
    documents = random_documents(30, seed=4)
    train = [d for i, d in enumerate(documents) if i % 7]  # a held-out document every 7: gaps
    instances = np.asarray(pack_full_sentences(train, 64))
    assert np.all(instances[:, 1] <= 62)
    given = np.zeros(int(documents[-1][-1]), dtype=bool)
    for d in train:
        given[d[0]:d[-1]] = True
    for start, length in instances[:, :2]:
        assert given[start:start + length].all()


def test_token_blocks_fill_every_position_and_keep_every_token_once():
    """Each block holds exactly max_seq_length - 2 positions ([SEP]s between documents counted), except
    the last of a run of adjacent documents and one that ends where a document does with a single
    position left (a [SEP] alone would fill it); the tokens are all there, in order, once."""
    documents = random_documents(40, seed=3)
    instances = np.asarray(pack_token_blocks(documents, 64))
    assert np.all(instances[:, 4] == -1) and np.all(instances[:, 2:4] == 0)
    starts, ends = instances[:, 0], instances[:, 0] + instances[:, 1]
    assert starts[0] == 0 and ends[-1] == documents[-1][-1] and np.array_equal(starts[1:], ends[:-1])
    doc_starts = np.array([d[0] for d in documents])
    positions = [n + np.sum((doc_starts > s) & (doc_starts < s + n)) for s, n in instances[:, :2]]
    short = [k for k, p in enumerate(positions[:-1]) if p != 62]
    assert all(positions[k] == 61 and ends[k] in doc_starts for k in short) and 0 < positions[-1] <= 62
    first = doc_of(documents, starts)
    assert np.any(first != doc_of(documents, ends - 1))  # blocks cross documents
    sentence_ends = np.concatenate([d[1:] for d in documents])
    assert not np.isin(ends[:-1], sentence_ends).all()  # and cut sentences


def test_token_blocks_end_where_a_document_was_not_given_and_before_a_lone_separator():
    documents = documents_of([[30], [30], [5], [40]])
    # capacity 8: the first document fills 3 blocks, its last 6 tokens share one with a [SEP] and the
    # second's first token; the held-out third document ends the run, so the fourth starts a block
    train = [documents[0], documents[1], documents[3]]
    instances = pack_token_blocks(train, 10)
    given = np.zeros(105, dtype=bool)
    for d in train:
        given[d[0]:d[-1]] = True
    for start, length, *_ in instances:
        assert given[start:start + length].all()
    assert instances[3] == (24, 7, 0, 0, -1)
    assert (55, 5, 0, 0, -1) in instances and (65, 8, 0, 0, -1) in instances
    # a document that would start in the block's last position starts the next block instead
    instances = pack_token_blocks(documents_of([[7], [8]]), 10)
    assert instances[0] == (0, 7, 0, 0, -1) and instances[1] == (7, 8, 0, 0, -1)


def test_token_blocks_is_a_packing_of_mlm_and_clm():
    assert instance_layout("mlm", "token_blocks") == (False, "token_blocks")
    assert instance_layout("clm", "token_blocks") == (False, "token_blocks")
    with pytest.raises(ValueError, match="token_blocks"):
        instance_layout("mlm_nsp", "token_blocks")
