import transformers

from bert_exp.data.tokenizer import SPECIAL_TOKENS, load_vocab_file, save_vocab, train_wordpiece

TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Caf\u00e9 owners don't like unbelievable, UNBELIEVABLE prices!",
    "Tokenizers split words into word-pieces: running, runner, runs.",
] * 50


def test_trained_vocabulary_behaves_like_bert_tokenizer_fast(tmp_path):
    tokenizer = train_wordpiece(TEXT, vocab_size=300, min_frequency=1)
    vocab_path = save_vocab(tokenizer, tmp_path)
    lines = vocab_path.read_text().split("\n")
    assert lines[:5] == SPECIAL_TOKENS
    assert (tmp_path / "tokenizer.json").exists()
    reference = transformers.BertTokenizerFast.from_pretrained(str(tmp_path), do_lower_case=True)
    assert reference.tokenize("the quick brown") == ["the", "quick", "brown"]
    reloaded = load_vocab_file(vocab_path)
    for text in TEXT[:3] + ["Unseen w\u00f6rds and [MASK] tokens.", "A pair", ""]:
        expected = reference(text)["input_ids"]
        assert tokenizer.encode(text).ids == expected
        assert reloaded.encode(text).ids == expected
    pair = reloaded.encode("first part", "second part")
    assert pair.ids == reference("first part", "second part")["input_ids"]
    assert pair.type_ids == reference("first part", "second part")["token_type_ids"]


def test_accents_and_case_options():
    cased = train_wordpiece(TEXT, vocab_size=300, min_frequency=1, lowercase=False, strip_accents=False)
    assert "The" in cased.encode("The").tokens
    assert cased.encode("Caf\u00e9").tokens[-2].endswith("\u00e9")
    uncased = train_wordpiece(TEXT, vocab_size=300, min_frequency=1)
    assert uncased.encode("CAF\u00c9").tokens == uncased.encode("cafe").tokens
