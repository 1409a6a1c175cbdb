"""ELECTRA both ways with HuggingFace transformers: our objective=electra model written as
ElectraForPreTraining (discriminator) and ElectraForMaskedLM (generator/), and transformers' ELECTRA
directories read as an encoder; tiny random models, real text (CoLA), outputs equal to 1e-5."""

import json
import logging

import pytest
import torch
import transformers

from helpers import cola_pairs_batch, perturb
from bert_exp.model import BertConfig, BertForMaskedLM, ElectraForPreTraining
from bert_exp.model.hf import TIED_KEYS, Checkpoint, CheckpointError, save_hf_directory
from bert_exp.tasks import ClassificationModule, OptimSettings
from bert_exp.tasks.checkpoints import load_checkpoint

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def text(data_dir):
    return cola_pairs_batch(data_dir)



def hf_electra(vocab_size: int, **kw) -> transformers.ElectraConfig:
    values = dict(vocab_size=vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    return transformers.ElectraConfig(**{**values, **kw})


@pytest.mark.parametrize("embedding_size", [16, 32], ids=["projected", "no_projection"])
def test_transformers_electra_discriminator_reads_as_our_encoder(embedding_size, text, tmp_path):
    batch, vocab = text
    theirs = perturb(transformers.ElectraForPreTraining(hf_electra(len(vocab), embedding_size=embedding_size)))
    theirs.save_pretrained(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.head is None and ckpt.config.embedding_size == (16 if embedding_size == 16 else None)
    assert not ckpt.config.share_layers
    ours = ElectraForPreTraining(ckpt.config, generator_size=0.5).eval()
    missing, unexpected = ours.load_state_dict(ckpt.state_dict, strict=False)
    assert not unexpected and all(k.startswith(("generator.", "bert.pooler.")) for k in missing), missing
    real = batch["attention_mask"].bool()
    args = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        ref = theirs(**batch, output_hidden_states=True)
        seq, _ = ours.bert(*args)
        logits = ours.discriminate(*args)
    torch.testing.assert_close(seq[real], ref.hidden_states[-1][real], **TOL)
    torch.testing.assert_close(logits[real], ref.logits[real], **TOL)
    # fine-tuning from it: only the pooler and the classifier start fresh
    module = ClassificationModule(ckpt.config, optim=OptimSettings(torch.optim.AdamW), num_labels=2)
    module.initialise_from(ckpt)
    assert sorted(module.fresh_parameters) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                               "classifier.bias", "classifier.weight"]


def test_transformers_electra_generator_reads_as_our_masked_lm(text, tmp_path):
    batch, vocab = text
    theirs = perturb(transformers.ElectraForMaskedLM(hf_electra(len(vocab), embedding_size=32, hidden_size=16,
                                                                num_attention_heads=1, intermediate_size=32)))
    theirs.save_pretrained(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.config.embedding_size == 32 and ckpt.config.hidden_size == 16
    ours = BertForMaskedLM(ckpt.config).eval()
    missing, unexpected = ours.load_state_dict(ckpt.state_dict, strict=False)
    assert set(missing) <= set(TIED_KEYS) and not unexpected, (missing, unexpected)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ref = theirs(**batch)
        logits = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    torch.testing.assert_close(logits[real], ref.logits[real], **TOL)


def electra_of_ours(vocab_size: int, **kw) -> tuple[BertConfig, ElectraForPreTraining]:
    config = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128, **kw)
    return config, perturb(ElectraForPreTraining(config, generator_size=0.5))  # generator: hidden 32, 2 heads


@pytest.mark.parametrize("embedding_size", [None, 16], ids=["bert_embeddings", "factorised"])
def test_our_electra_exports_discriminator_and_generator(embedding_size, text, tmp_path):
    batch, vocab = text
    config, ours = electra_of_ours(len(vocab), embedding_size=embedding_size)
    save_hf_directory(Checkpoint(config, ours.state_dict(), vocab, True, None, source="electra-run"), tmp_path / "out")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["architectures"] == ["ElectraForPreTraining"] and written["embedding_size"] == config.embedding_width
    discriminator, info = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    generator, info = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "out" / "generator",
                                                                      output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert generator.config.hidden_size == 32 and generator.config.embedding_size == config.embedding_width
    real = batch["attention_mask"].bool()
    args = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    with torch.no_grad():
        rtd, mlm = discriminator.eval()(**batch).logits, generator.eval()(**batch).logits
        torch.testing.assert_close(ours.discriminate(*args)[real], rtd[real], **TOL)
        torch.testing.assert_close(ours.generator(*args)[real], mlm[real], **TOL)
    # read back by us: the discriminator, whose head an objective=electra run picks up again
    back = load_checkpoint(tmp_path / "out")
    assert back.config == config and back.head is None
    for key, value in back.state_dict.items():
        assert torch.equal(value, ours.state_dict()[key]), key


def test_a_generator_transformers_cannot_reproduce_is_left_out_with_a_warning(text, tmp_path, caplog):
    _, vocab = text
    config, ours = electra_of_ours(len(vocab), hidden_act="gelu_tanh")  # ElectraForMaskedLM's head: gelu always
    with caplog.at_level(logging.WARNING):
        save_hf_directory(Checkpoint(config, ours.state_dict(), vocab, source="tanh-run"), tmp_path / "out")
    assert "tanh-run: the generator is not exported" in caplog.text
    assert (tmp_path / "out" / "model.safetensors").is_file() and not (tmp_path / "out" / "generator").exists()


def test_shared_layers_have_no_electra_equivalent(tmp_path):
    config, ours = electra_of_ours(100, share_layers=True)
    with pytest.raises(CheckpointError, match=r"electra-run: a model with model.share_layers=True has no "
                                              r"HuggingFace ELECTRA equivalent"):
        save_hf_directory(Checkpoint(config, ours.state_dict(), source="electra-run"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
