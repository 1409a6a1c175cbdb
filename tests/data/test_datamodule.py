import pickle

import numpy as np
import pytest
import torch

from bert_exp.data import InstanceSettings, LoaderSettings, MaskingSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.masking import IGNORE_INDEX


@pytest.fixture(scope="module")
def inaugural_dm(data_dir, cache_dir):
    dm = PretrainingDataModule(
        files=[str(data_dir / "corpus" / "inaugural" / "*.txt")], tokenizer=TokenizerSpec(vocab_size=3000),
        cache_dir=str(cache_dir), loader=LoaderSettings(batch_size=16), instances=InstanceSettings(val_fraction=0.1),
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_batches(inaugural_dm):
    batch = next(iter(inaugural_dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 16 and batch["input_ids"].shape[1] <= 128
    assert batch["masked_lm_positions"].shape == (16, 20)
    assert set(batch["next_sentence_label"].tolist()) <= {0, 1}
    assert torch.all(batch["input_ids"][:, 0] == inaugural_dm.special_ids.cls)
    assert (batch["masked_lm_labels"] != IGNORE_INDEX).any()


def test_validation_documents_are_held_out(inaugural_dm):
    directory = inaugural_dm.corpus_dir
    doc_starts = np.load(directory / "doc_starts.npy")
    docs = {}
    for split in ("train", "val"):
        inst = np.load(directory / f"{split}.npy")
        docs[split] = set(np.searchsorted(doc_starts, inst[:, 0], side="right")) | \
            set(np.searchsorted(doc_starts, inst[:, 2], side="right"))
    assert docs["val"] and docs["train"] and not docs["val"] & docs["train"]
    assert len(docs["val"]) == round(0.1 * 55)


def test_cache_is_reused_and_keyed_by_settings(inaugural_dm, data_dir, cache_dir):
    directory = inaugural_dm.corpus_dir
    stamp = (directory / "tokens.npy").stat().st_mtime_ns
    again = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural")], tokenizer=TokenizerSpec(vocab_size=3000),
                                  cache_dir=str(cache_dir), instances=InstanceSettings(val_fraction=0.1))
    # a directory names the same files: its README is skipped as not corpus text
    assert again.files == inaugural_dm.files and again.corpus_dir == directory
    same = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                 tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                                 instances=InstanceSettings(val_fraction=0.1))
    assert same.corpus_dir == directory
    same.prepare_data()
    assert (directory / "tokens.npy").stat().st_mtime_ns == stamp  # not rebuilt
    other = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                  tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                                  instances=InstanceSettings(val_fraction=0.1, max_seq_length=64))
    assert other.corpus_dir != directory


def test_dataset_is_memory_mapped_and_pickles_small(inaugural_dm):
    dataset = inaugural_dm.datasets["train"]
    dataset[0]
    tokens = dataset._arrays[0]
    assert isinstance(tokens, np.memmap)
    assert len(pickle.dumps(dataset)) < 10_000  # workers get paths, not the corpus


def test_vocab_file_is_used_as_given(data_dir, cache_dir, tmp_path, inaugural_dm):
    vocab = inaugural_dm.save_vocab(tmp_path)
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "1789-Washington.txt"),
                                      str(data_dir / "corpus" / "inaugural" / "1793-Washington.txt")],
                               tokenizer=TokenizerSpec(vocab_file=str(vocab)), cache_dir=str(cache_dir),
                               instances=InstanceSettings(val_fraction=0))
    assert dm.vocab_size == inaugural_dm.vocab_size
    assert dm.tokenizer.encode("the people").ids == inaugural_dm.tokenizer.encode("the people").ids


def test_mlm_only_and_static_masking(data_dir, cache_dir):
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                               tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                               nsp=False, masking=MaskingSettings(mode="static"), instances=InstanceSettings(dupe_factor=2),
                               loader=LoaderSettings(batch_size=8))
    dm.setup("fit")
    loader = dm.val_dataloader()
    first, second = next(iter(loader)), next(iter(loader))
    assert torch.equal(first["input_ids"], second["input_ids"])  # the same masks every epoch
    assert torch.all(first["next_sentence_label"] == IGNORE_INDEX)
    assert torch.all(first["token_type_ids"] == 0)
    assert first["attention_mask"].sum(1).max() > 100  # packed to full length


def test_too_few_documents_is_a_clear_error(data_dir, cache_dir):
    from bert_exp.data.text import CorpusError
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "tinyshakespeare" / "input.txt")],
                               tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir))
    with pytest.raises(CorpusError, match="1 documents"):
        dm.prepare_data()


def test_cache_build_memory_does_not_grow_with_the_corpus(data_dir, tmp_path):
    """Tokens and instances stream to disk: 4x the corpus must not need ~4x the memory."""
    import tracemalloc

    from bert_exp.data.corpus import InstanceSettings, build_corpus_cache
    from bert_exp.data.tokenizer import load_vocab_file
    from bert_exp.resources import minilm_dir

    tokenizer = load_vocab_file(minilm_dir() / "vocab.txt")
    source = tmp_path / "part.txt"  # 200 kB of tiny-shakespeare, a document per file
    source.write_bytes((data_dir / "corpus" / "tinyshakespeare" / "input.txt").read_bytes()[:200_000])
    peaks = {}
    for scale in (1, 4):
        files = []
        for copy in range(4 * scale):
            link = tmp_path / f"in{scale}" / f"{copy}.txt"
            link.parent.mkdir(exist_ok=True)
            link.symlink_to(source)
            files.append(link)
        out = tmp_path / f"out{scale}"
        out.mkdir()
        tracemalloc.start()
        build_corpus_cache(files, tokenizer, out, InstanceSettings(), {})
        peaks[scale] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert np.load(out / "tokens.npy", mmap_mode="r").shape[0] > 40_000 * 4 * scale
    assert peaks[4] < 1.5 * peaks[1], peaks


def test_whole_word_masking_on_the_real_vocabulary(data_dir, cache_dir):
    """data.masking.whole_word: the collator gets the vocabulary's ## pieces, and masks them with their word."""
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                               tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                               loader=LoaderSettings(batch_size=16), instances=InstanceSettings(val_fraction=0.1),
                               masking=MaskingSettings(whole_word=True, count_special_tokens=True))
    dm.setup("fit")
    vocab = dm.tokenizer.get_vocab()
    table = dm.collator.continuation
    assert dm.collator.count_special_tokens and table.sum() == sum(t.startswith("##") for t in vocab)
    batch = next(iter(dm.train_dataloader()))
    ids, positions, labels = batch["input_ids"], batch["masked_lm_positions"], batch["masked_lm_labels"]
    original = ids.clone()
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    for row in range(len(ids)):
        keep = labels[row] != IGNORE_INDEX
        chosen[row, positions[row][keep]] = True
        original[row, positions[row][keep]] = labels[row][keep]
    special = dm.special_ids
    previous = original[:, :-1]
    after_a_word = (previous != special.pad) & (previous != special.cls) & (previous != special.sep)
    pieces = table[original][:, 1:] & after_a_word  # a ## piece continuing the word before it
    assert pieces.any()  # words of several pieces occur
    assert torch.equal(chosen[:, 1:][pieces], chosen[:, :-1][pieces]), "a piece masked apart from its word"


def test_a_prediction_cap_below_the_masking_rate_is_named(tmp_path, caplog):
    """Sequences of 256 with the default cap of 20 predictions would mask 8 %, not 15 %: said, not silent."""
    def build(length, cap):
        caplog.clear()
        PretrainingDataModule(files=[str(tmp_path)], tokenizer=TokenizerSpec(vocab_size=100), cache_dir=str(tmp_path),
                              instances=InstanceSettings(max_seq_length=length),
                              masking=MaskingSettings(max_predictions_per_seq=cap))
        return [r.getMessage() for r in caplog.records if "max_predictions_per_seq" in r.getMessage()]

    with caplog.at_level("WARNING", logger="bert_exp.data"):
        assert build(128, 20) == []  # BERT's phase 1: 15 % of 126 is 19
        assert build(512, 76) == []  # and phase 2 (Google: 76 at 512)
        (message,) = build(256, 20)
        assert "max_predictions_per_seq=20" in message and "7.9 %" in message and "about 38" in message
