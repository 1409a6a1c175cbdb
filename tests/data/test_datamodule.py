import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bert_exp.data import InstanceSettings, LoaderSettings, MaskingSettings, PretrainingDataModule, TokenizerSpec
from bert_exp.data.corpus.masking import IGNORE_INDEX
from bert_exp.data.corpus.preparation import PrepareSettings
from helpers import REPO


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
    from bert_exp.data.corpus.groups import cut_group

    files, settings = inaugural_dm.files, inaugural_dm.settings
    splits = {split: cut_group(files, inaugural_dm.tokenizer, settings, 0, split) for split in ("train", "val")}
    held, kept = set(splits["val"].documents), set(splits["train"].documents)
    assert len(held) == round(0.1 * 55) and len(held | kept) == 55 and not held & kept
    for split, cut in splits.items():  # every A and B lies inside one document of the split's own
        own = cut.doc_starts
        for a_start, a_len, b_start, b_len, _ in cut.instances:
            for start, length in ((a_start, a_len), (b_start, b_len)):
                k = np.searchsorted(own, start, side="right") - 1
                assert 0 <= k < len(own) - 1 and start + length <= own[k + 1], (split, start, length)
    # what the prepared data holds: as many instances as cutting the group gives
    assert inaugural_dm.meta["splits"]["val"]["instances"] == len(splits["val"].instances)
    assert inaugural_dm.meta["splits"]["train"]["instances"] == len(splits["train"].instances)


def test_prepared_data_is_reused_and_keyed_by_settings(inaugural_dm, data_dir, cache_dir):
    location = inaugural_dm.prepared_location
    meta = Path(location.join("meta.json"))
    stamp = meta.stat().st_mtime_ns
    again = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural")], tokenizer=TokenizerSpec(vocab_size=3000),
                                  cache_dir=str(cache_dir), instances=InstanceSettings(val_fraction=0.1))
    # a directory names the same files: its README is skipped as not corpus text
    assert again.files == inaugural_dm.files and again.prepared_location.url == location.url
    again.prepare_data()
    assert meta.stat().st_mtime_ns == stamp  # not prepared again
    other = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                  tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                                  instances=InstanceSettings(val_fraction=0.1, max_seq_length=64))
    assert other.prepared_location.url != location.url
    grouped = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                    tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                                    instances=InstanceSettings(val_fraction=0.1), prepare=PrepareSettings(group_bytes="64KB"))
    assert grouped.prepared_location.url != location.url  # NotNext segments come from other groups
    workers = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                    tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                                    instances=InstanceSettings(val_fraction=0.1), prepare=PrepareSettings(num_workers=3))
    assert workers.prepared_location.url == location.url  # how it is prepared is not what it holds


def test_datasets_pickle_small(inaugural_dm):
    """Loader workers receive where the data is, not the data."""
    loader = inaugural_dm.train_dataloader()
    assert len(pickle.dumps(loader.dataset)) < 20_000
    val = inaugural_dm.datasets["val"]
    val[0]
    assert len(pickle.dumps(val)) < 10_000


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
    from bert_exp.data.corpus import CorpusError
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "tinyshakespeare" / "input.txt")],
                               tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir))
    with pytest.raises(CorpusError, match="1 documents"):
        dm.prepare_data()


def test_preparation_memory_does_not_grow_with_the_corpus(data_dir, tmp_path):
    """Groups of a fixed size, each prepared with the memory it needs: 4x the corpus must not need ~4x the
    memory. Each preparation runs in a fresh process, which reports the peak RSS of its own and of the
    processes it waited for (the preparing process and litdata's workers)."""
    source = tmp_path / "part.txt"  # 200 kB of tiny-shakespeare, a document per file
    source.write_bytes((data_dir / "corpus" / "tinyshakespeare" / "input.txt").read_bytes()[:200_000])
    script = """
import json, resource, sys
from pathlib import Path
from bert_exp.data.corpus.groups import InstanceSettings
from bert_exp.data.corpus.preparation import PrepareSettings, prepare
from bert_exp.data.corpus.storage import Location
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.resources import minilm_dir
tokenizer = load_vocab_file(minilm_dir() / "vocab.txt")
files = [Path(f) for f in sys.argv[2:]]
meta = prepare(Location(sys.argv[1]), files, tokenizer.to_str(), tokenizer.get_vocab_size(), InstanceSettings(),
               PrepareSettings(group_bytes="800KB", num_workers=1), {})
print(json.dumps({"tokens": meta["report"]["tokens"],
                  "rss": max(resource.getrusage(r).ru_maxrss for r in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))}))
"""
    peaks = {}
    for scale in (1, 4):
        files = []
        for copy in range(4 * scale):
            link = tmp_path / f"in{scale}" / f"{copy}.txt"
            link.parent.mkdir(exist_ok=True)
            link.symlink_to(source)
            files.append(str(link))
        result = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"out{scale}"), *files], cwd=REPO,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        measured = json.loads(result.stdout.strip().splitlines()[-1])
        assert measured["tokens"] > 40_000 * 4 * scale
        peaks[scale] = measured["rss"]
    assert peaks[4] < 1.2 * peaks[1], peaks


@pytest.mark.parametrize("strategy", ["whole_word", "span"])
def test_word_masking_on_the_real_vocabulary(data_dir, cache_dir, strategy):
    """data.masking.strategy=whole_word or span: the collator gets the vocabulary's ## pieces, and masks them
    with their word; spans meet the budget (15 % of the tokens with [CLS] and [SEP]) exactly."""
    dm = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                               tokenizer=TokenizerSpec(vocab_size=3000), cache_dir=str(cache_dir),
                               loader=LoaderSettings(batch_size=16), instances=InstanceSettings(val_fraction=0.1),
                               masking=MaskingSettings(strategy=strategy, count_special_tokens=True))
    dm.setup("fit")
    vocab = dm.tokenizer.get_vocab()
    table = dm.collator.continuation
    assert dm.collator.masking.count_special_tokens and table.sum() == sum(t.startswith("##") for t in vocab)
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
    if strategy == "span":  # real text has one-piece words left to fill the budget with
        budget = torch.round(batch["attention_mask"].sum(1).double() * 0.15).long().clamp(max=20)
        assert torch.equal(chosen.sum(1), budget)


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
