"""RoBERTa's byte-level BPE through the CLI: ``pretrain_roberta_tiny`` (which trains one) for 3 steps on
the inaugural addresses, then CoLA fine-tuned from that run with ``task.init_from``: the tokenizer travels
as tokenizer.json in the run and in its checkpoints, and the export writes it (slow: about 15 s a run
on 2 cores)."""

import json

import pytest
import transformers
from helpers import run_cli

from bert_exp.data.tokenizer import (
    checkpoint_tokenizer,
    load_vocab_file,
    tokenizer_kind,
)
from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.tools.export import main as export_main
from bert_exp.tools.predict import Predictor

pytestmark = pytest.mark.slow

TEXT = "Fellow-Citizens of the Senate: caf\u00e9, na\u00efve \U0001f600"


@pytest.fixture(scope="module")
def env(data_dir, cache_dir, tmp_path_factory):
    outputs = tmp_path_factory.mktemp("outputs")
    return {"BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir), "BERT_EXP_OUTPUTS": str(outputs)}


@pytest.fixture(scope="module")
def pretrained(env, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("roberta") / "run"
    result = run_cli(["+experiment=pretrain_roberta_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/*.txt]",
                      "data.tokenizer.vocab_size=2000", "trainer.max_steps=3", "trainer.val_check_interval=3",
                      "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def cola(pretrained, env, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cola") / "run"
    result = run_cli(["+experiment=cola_tiny", f"task.init_from={pretrained}", "trainer.max_steps=3",
                      "trainer.limit_val_batches=2", "logger=csv", f"hydra.run.dir={run_dir}"], env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_pretraining_saves_its_byte_level_tokenizer(pretrained):
    info = json.loads((pretrained / "run.json").read_text())
    assert info["status"] == "finished" and info["config"]["data"]["tokenizer"]["kind"] == "byte_bpe"
    assert (pretrained / "tokenizer.json").is_file() and not (pretrained / "vocab.txt").exists()
    saved = load_vocab_file(pretrained / "tokenizer.json")
    ckpt = load_checkpoint(pretrained)
    assert ckpt.tokenizer and ckpt.lowercase is False and len(ckpt.vocab) == ckpt.config.vocab_size == 2000
    carried = checkpoint_tokenizer(ckpt.vocab, ckpt.lowercase, ckpt.tokenizer)
    assert tokenizer_kind(carried) == "byte_bpe" and carried.encode(TEXT).ids == saved.encode(TEXT).ids
    # fill-mask writes the predicted piece as text: its "Ġ" is the space the text has before [MASK]
    (filled,) = Predictor(pretrained, device="cpu").fill_mask(["The [MASK] of the United States."])
    word = filled["filled"].removeprefix("The ").removesuffix(" of the United States.")
    assert filled["masks"][0]["predictions"][0]["token"].endswith(word) and "\u0120" not in filled["filled"]


def test_cola_fine_tunes_from_it_with_the_same_tokenizer(pretrained, cola, tmp_path):
    info = json.loads((cola / "run.json").read_text())
    assert info["status"] == "finished" and info["initialised_from"] == str(pretrained / "checkpoints" / "last.ckpt")
    assert info["fresh_parameters"] == ["classifier.weight", "classifier.bias"]
    assert (cola / "tokenizer.json").read_text() == (pretrained / "tokenizer.json").read_text()
    ckpt = load_checkpoint(cola)
    assert ckpt.head == "classification" and ckpt.tokenizer == load_checkpoint(pretrained).tokenizer
    # the export writes tokenizer.json (no vocab.txt), which transformers loads as the same tokenizer
    out = tmp_path / "hf"
    assert export_main([str(cola), str(out)]) == 0
    assert (out / "tokenizer.json").is_file() and not (out / "vocab.txt").exists()
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    assert theirs(TEXT)["input_ids"] == load_vocab_file(cola / "tokenizer.json").encode(TEXT).ids
