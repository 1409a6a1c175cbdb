"""data.tokenizer.kind=byte_bpe: RoBERTa's byte-level BPE, trained on a slice of the shared corpus."""

import json

import pytest
import torch

from bert_exp.data import (
    InstanceSettings,
    LoaderSettings,
    MaskingSettings,
    PretrainingDataModule,
    TokenizerSpec,
)
from bert_exp.data.base import VocabularyDataModule
from bert_exp.data.corpus.masking import continuation_table
from bert_exp.data.tasks.squad import SquadExample, answer_token_span, make_features
from bert_exp.data.tasks.tagging import IGNORE, TaggingDataModule
from bert_exp.data.tokenizer import (
    SPECIAL_TOKENS,
    SpecialIds,
    VocabularyError,
    checkpoint_tokenizer,
    load_vocab_file,
    save_vocab,
    tokenizer_json,
    tokenizer_kind,
    train_byte_bpe,
    vocab_list,
)

ODD_TEXTS = [
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 Z\u00fcrich, \u00c5ngstr\u00f6m",
    "emoji \U0001f600\U0001f44d\U0001f3fd and \u6f22\u5b57 and \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "tabs\tand  two spaces,\nnew line,\u00a0no-break space and trailing  ",
    " starts with a space",
    "",
]


@pytest.fixture(scope="module")
def bpe(data_dir):
    lines = (data_dir / "corpus" / "gutenberg-nltk" / "austen-emma.txt").read_text(encoding="utf-8").splitlines()
    return train_byte_bpe(lines[:400], vocab_size=600)


def test_trained_on_real_text_with_our_special_tokens_first(bpe):
    assert tokenizer_kind(bpe) == "byte_bpe" and bpe.get_vocab_size() == 600
    assert vocab_list(bpe)[:5] == SPECIAL_TOKENS  # the ids WordPiece has: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4
    assert "\u0120Emma" in bpe.get_vocab()  # a frequent word, with its space
    assert bpe.encode("Emma Woodhouse").tokens[0] == "[CLS]" and bpe.encode("Emma").tokens[-1] == "[SEP]"


@pytest.mark.parametrize("text", ODD_TEXTS)
def test_round_trip_is_lossless(bpe, text):
    ids = bpe.encode(text).ids
    assert bpe.token_to_id("[UNK]") not in ids  # every byte is in the vocabulary
    # the one space a text starts with (add_prefix_space) is all that decoding adds
    assert bpe.decode(ids) == (text if not text or text.startswith(" ") else " " + text)


def test_offsets_are_character_offsets_into_the_text(bpe):
    text = "The caf\u00e9 in Z\u00fcrich opened in 1999 \U0001f600 and  closed."
    enc = bpe.encode(text, add_special_tokens=False)
    for (start, end), token in zip(enc.offsets, enc.tokens):
        assert 0 <= start <= end <= len(text) and not text[start:end].startswith(" "), (token, start, end)
    # every character but the spaces is covered by some token
    covered = {i for start, end in enc.offsets for i in range(start, end)}
    assert covered == {i for i, c in enumerate(text) if c != " "}
    # SQuAD maps a character span to tokens and back (bert_exp.data.tasks.squad)
    for answer in ("Z\u00fcrich", "caf\u00e9", "1999", "\U0001f600", "closed"):
        start = text.index(answer)
        first, last = answer_token_span(enc.offsets, start, start + len(answer))
        assert text[enc.offsets[first][0]:enc.offsets[last][1]] == answer


def test_pre_split_words_are_tokenized_as_inside_a_text(bpe):
    """Tagging encodes pre-split words: each word gets the tokens it has inside a sentence, and word_ids."""
    words = ["Emma", "saw", "Z\u00fcrich", "\U0001f600", "."]
    whole = bpe.encode("Emma saw Z\u00fcrich \U0001f600 .", add_special_tokens=False)
    split = bpe.encode(words, is_pretokenized=True, add_special_tokens=False)
    assert split.ids == whole.ids
    firsts = [split.word_ids.index(w) for w in range(len(words))]
    assert all(split.tokens[i].startswith("\u0120") for i in firsts)


def test_squad_windows_map_answers_back_to_the_context(bpe):
    context = "Emma met Mr. Kn\u00efghtley in Z\u00fcrich \U0001f600 on a cold morning; " * 3
    start = context.index("Z\u00fcrich", 60)
    example = SquadExample("q", "Where did Emma meet him?", context, [{"text": "Z\u00fcrich", "answer_start": start}])
    windows = make_features([example], bpe, max_seq_length=40, doc_stride=16)
    features = [f for f in windows if f.start_position]  # the windows that hold the answer
    assert len(windows) > 2 and features
    for f in features:
        assert f.input_ids[0] == 2 and f.input_ids[-1] == 3
        span = context[f.offsets[f.start_position][0]:f.offsets[f.end_position][1]]
        assert span == "Z\u00fcrich"


def test_tagging_labels_each_words_first_piece(bpe, tmp_path):
    train = tmp_path / "train.conll"
    train.write_text("Emma B-PER\nvisited O\nZ\u00fcrich B-LOC\n\U0001f600 O\n", encoding="utf-8")
    dm = TaggingDataModule(str(train), {"dev": str(train)})
    dm.use_vocabulary(vocab_list(bpe), False, tokenizer_json(bpe))
    dm.setup()
    (f,) = dm.datasets["dev"].features
    words = ["Emma", "visited", "Z\u00fcrich", "\U0001f600"]
    pieces = bpe.encode(words, is_pretokenized=True)
    assert f["input_ids"] == pieces.ids
    firsts = [pieces.word_ids.index(w) for w in range(len(words))]
    assert [i for i, w in enumerate(f["word_index"]) if w >= 0] == firsts
    assert [f["labels"][i] for i in firsts] == [dm.labels.index(x) for x in ("B-PER", "O", "B-LOC", "O")]
    assert sum(label != IGNORE for label in f["labels"]) == len(words)


def test_special_token_ids_are_what_masking_and_instances_expect(bpe):
    dm = VocabularyDataModule()
    dm.use_vocabulary(vocab_list(bpe), False, tokenizer_json(bpe))
    assert dm.special_ids == SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=600)
    pair = dm.tokenizer.encode("first part", "second part")
    assert pair.ids[0] == 2 and pair.ids.count(3) == 2 and pair.ids[-1] == 3
    assert pair.type_ids == [0] * (pair.ids.index(3) + 1) + [1] * (len(pair.ids) - pair.ids.index(3) - 1)
    # [MASK] in raw text (fill-mask) is the mask id, and takes the space before it as RoBERTa's <mask>
    assert dm.tokenizer.encode("Emma [MASK] it").ids[2] == 4
    # whole-word masking: a word's first piece carries the space, the pieces after it continue it
    vocab = bpe.get_vocab()
    table = continuation_table(vocab, byte_level=True)
    assert not table[vocab["\u0120Emma"]] and not table[:5].any()
    assert table[[i for t, i in vocab.items() if not t.startswith("\u0120") and t not in SPECIAL_TOKENS]].all()


def test_saved_and_reloaded_encodes_identically(bpe, tmp_path):
    bpe.enable_truncation(8)  # a DataModule's state, never saved with it
    try:
        path = save_vocab(bpe, tmp_path)
        carried = tokenizer_json(bpe)
    finally:
        bpe.no_truncation()
    assert path == tmp_path / "tokenizer.json" and not (tmp_path / "vocab.txt").exists()  # no merges in a vocab.txt
    reloaded = load_vocab_file(path)
    from_checkpoint = checkpoint_tokenizer(vocab_list(bpe), False, carried)
    assert json.loads(carried)["truncation"] is None
    for tokenizer in (reloaded, from_checkpoint):
        assert tokenizer_kind(tokenizer) == "byte_bpe"
        for text in ODD_TEXTS + ["a [MASK] word"]:
            expected = bpe.encode(text)
            got = tokenizer.encode(text)
            assert (got.ids, got.offsets) == (expected.ids, expected.offsets)
        assert tokenizer.encode("one", "two").ids == bpe.encode("one", "two").ids


def test_exported_model_directory_loads_the_same_tokenizer(bpe, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bert_exp.model import BertConfig, BertForPreTraining
    from bert_exp.model.hf import Checkpoint, load_hf_directory, save_hf_directory

    config = BertConfig(vocab_size=600, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    ckpt = Checkpoint(config, BertForPreTraining(config).state_dict(), vocab_list(bpe), False, "pretraining",
                      tokenizer=tokenizer_json(bpe))
    out = save_hf_directory(ckpt, tmp_path / "out")
    assert (out / "tokenizer.json").is_file() and not (out / "vocab.txt").exists()
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    for text in ODD_TEXTS[:3]:
        assert theirs(text)["input_ids"] == bpe.encode(text).ids
    assert theirs("one", "two")["token_type_ids"] == bpe.encode("one", "two").type_ids
    assert theirs.mask_token_id == 4 and theirs.pad_token_id == 0
    back = load_hf_directory(out)
    assert back.tokenizer and back.lowercase is False and checkpoint_tokenizer(back.vocab, back.lowercase, back.tokenizer).encode(
        ODD_TEXTS[0]).ids == bpe.encode(ODD_TEXTS[0]).ids


def test_tokenizer_settings():
    wordpiece = TokenizerSpec(vocab_size=3000)
    # the key of the vocabularies trained before there were kinds, and since it became deterministic
    assert wordpiece.cache_fields == {"vocab_file": None, "vocab_size": 3000, "min_frequency": 2, "limit_alphabet": 1000,
                                      "lowercase": True, "strip_accents": None, "training": "pinned_ids"}
    byte_bpe = TokenizerSpec(kind="byte_bpe", vocab_size=3000)
    assert byte_bpe.lowercase is False and byte_bpe.cache_fields["kind"] == "byte_bpe"
    assert TokenizerSpec(kind="byte_bpe", lowercase=True).lowercase is True
    with pytest.raises(VocabularyError, match="data.tokenizer.strip_accents"):
        TokenizerSpec(kind="byte_bpe", strip_accents=True)
    with pytest.raises(VocabularyError, match="data.tokenizer.kind='bpe'"):
        TokenizerSpec(kind="bpe")


def test_a_vocab_txt_for_byte_bpe_is_refused(tmp_path, cache_dir):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL_TOKENS + ["a", "b"]) + "\n")
    dm = PretrainingDataModule(files=[str(vocab)], tokenizer=TokenizerSpec(vocab_file=str(vocab), kind="byte_bpe"),
                               cache_dir=str(cache_dir))
    with pytest.raises(VocabularyError, match=r"data.tokenizer.vocab_file=.*vocab.txt is a wordpiece tokenizer"):
        dm.tokenizer  # noqa: B018


@pytest.fixture(scope="module")
def bpe_dm(data_dir, cache_dir):
    dm = PretrainingDataModule(
        files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
        tokenizer=TokenizerSpec(kind="byte_bpe", vocab_size=2000), cache_dir=str(cache_dir),
        objective="mlm", loader=LoaderSettings(batch_size=8), instances=InstanceSettings(val_fraction=0.1),
        masking=MaskingSettings(strategy="whole_word"),
    )
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_pretraining_instances_with_byte_bpe(bpe_dm, data_dir, cache_dir):
    tokenizer = bpe_dm.tokenizer
    assert tokenizer_kind(tokenizer) == "byte_bpe" and bpe_dm.lowercase is False
    assert sorted(p.name for p in bpe_dm.tokenizer_dir.iterdir()) == ["sha256.json", "tokenizer.json"]  # no vocab.txt
    batch = next(iter(bpe_dm.train_dataloader()))
    ids = batch["input_ids"]
    assert torch.all(ids[:, 0] == bpe_dm.special_ids.cls) and (batch["masked_lm_labels"] != -100).any()
    text = tokenizer.decode(ids[0][ids[0] != 0].tolist())
    assert "the" in text.lower() and "\ufffd" not in text  # byte-level pieces decode back to text
    # the whole-word table marks the pieces without the space
    assert bpe_dm.collator.continuation is not None and not bpe_dm.collator.continuation[bpe_dm.special_ids.mask]
    # the prepared data is keyed by the tokenizer kind: the same settings with WordPiece are other data
    wordpiece = PretrainingDataModule(files=[str(data_dir / "corpus" / "inaugural" / "*.txt")],
                                      tokenizer=TokenizerSpec(vocab_size=2000), cache_dir=str(cache_dir),
                                      objective="mlm", instances=InstanceSettings(val_fraction=0.1))
    assert wordpiece.prepared_location.url != bpe_dm.prepared_location.url


def test_the_roberta_preset_builds_instances_with_byte_bpe(data_dir, cache_dir):
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config(["+experiment=pretrain_roberta_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/*.txt]",
                          "data.tokenizer.kind=byte_bpe", "data.tokenizer.vocab_size=2000", f"paths.cache_dir={cache_dir}"])
    dm = instantiate(cfg.data, loader=instantiate(cfg.data.loader, batch_size=4))
    dm.prepare_data()
    dm.setup("fit")
    assert tokenizer_kind(dm.tokenizer) == "byte_bpe" and len(dm.datasets["train"]) > 100
    sample = dm.datasets["train"][0]
    ids = list(sample["input_ids"])
    assert ids[0] == dm.special_ids.cls and ids[-1] == dm.special_ids.sep and len(ids) <= 128
