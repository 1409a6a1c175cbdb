"""Checkpoints move both ways with HuggingFace: parity on the real all-MiniLM-L6-v2 checkpoint and
exports that transformers loads with no missing or unexpected keys and the same logits."""

import json
import shutil
from functools import partial

import pytest
import torch
import transformers

from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.tools.export import main as export_main
from bert_exp.model import BertModel
from bert_exp.model.hf import Checkpoint, CheckpointError, save_hf_directory
from bert_exp.tasks.checkpoints import load_checkpoint
from bert_exp.resources import minilm_dir
from bert_exp.tasks import ClassificationModule, PretrainingModule, QuestionAnsweringModule
from bert_exp.tasks import OptimSettings, Vocabulary

MINILM = minilm_dir()
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Caf\u00e9s don't open early.",
             "A much longer sentence, with commas, numbers like 1,234 and a question?", "Short."]


def padded_batch(tokenizer, pairs=False):
    tokenizer.enable_padding(pad_id=0)
    inputs = list(zip(SENTENCES, reversed(SENTENCES))) if pairs else SENTENCES
    encodings = tokenizer.encode_batch(inputs)
    tokenizer.no_padding()
    as_tensor = lambda name: torch.tensor([getattr(e, name) for e in encodings])  # noqa: E731
    batch = {"input_ids": as_tensor("ids"), "token_type_ids": as_tensor("type_ids"),
             "attention_mask": as_tensor("attention_mask")}
    assert (batch["attention_mask"] == 0).any()  # really padded
    return batch


def test_minilm_encoder_equals_transformers():
    ckpt = load_checkpoint(MINILM)
    assert ckpt.head is None and ckpt.config.hidden_size == 384 and len(ckpt.vocab) == 30522
    ours = BertModel(ckpt.config).eval()
    missing, unexpected = ours.load_state_dict({k.removeprefix("bert."): v for k, v in ckpt.state_dict.items()})
    assert not missing and not unexpected
    theirs = transformers.BertModel.from_pretrained(MINILM).eval()
    batch = padded_batch(load_vocab_file(MINILM / "vocab.txt"))
    with torch.no_grad():
        seq, pooled = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        ref = theirs(**batch)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(seq[real], ref.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pooled, ref.pooler_output, atol=1e-5, rtol=1e-5)


def module_from_minilm(cls, **kw):
    ckpt = load_checkpoint(MINILM)
    module = cls(ckpt.config, optim=OptimSettings(partial(torch.optim.AdamW, lr=1e-5)), vocabulary=Vocabulary(ckpt.vocab), **kw)
    module.initialise_from(ckpt)
    torch.manual_seed(0)
    for name, param in module.model.named_parameters():  # the fresh head: make it non-trivial
        if name.startswith(module.head_prefixes):
            torch.nn.init.normal_(param, std=0.5)
    return module.eval()


HEADS = [
    (PretrainingModule, {}, transformers.BertForPreTraining, "pretraining"),
    (ClassificationModule, {"num_labels": 3}, transformers.BertForSequenceClassification, "classification"),
    (QuestionAnsweringModule, {}, transformers.BertForQuestionAnswering, "question_answering"),
]


@pytest.mark.parametrize("module_cls, kwargs, hf_cls, head", HEADS, ids=[h[3] for h in HEADS])
def test_export_loads_in_transformers_with_equal_logits(module_cls, kwargs, hf_cls, head, tmp_path):
    module = module_from_minilm(module_cls, **kwargs)
    assert module.fresh_parameters and all(k.startswith(module.head_prefixes) for k in module.fresh_parameters)
    ckpt = Checkpoint(module.config, module.model.state_dict(), module.vocab, True, head, kwargs.get("num_labels"))
    save_hf_directory(ckpt, tmp_path / "out")
    theirs, info = hf_cls.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    theirs.eval()
    batch = padded_batch(load_vocab_file(tmp_path / "out" / "vocab.txt"), pairs=True)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        ref = theirs(**batch)
        if head == "pretraining":
            mlm, nsp = module.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            torch.testing.assert_close(mlm[real], ref.prediction_logits[real], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(nsp, ref.seq_relationship_logits, atol=1e-5, rtol=1e-5)
        elif head == "classification":
            torch.testing.assert_close(module(batch), ref.logits, atol=1e-5, rtol=1e-5)
            assert theirs.config.num_labels == 3
        else:
            start, end = module(batch)
            torch.testing.assert_close(start[real], ref.start_logits[real], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(end[real], ref.end_logits[real], atol=1e-5, rtol=1e-5)
    assert transformers.BertTokenizerFast.from_pretrained(tmp_path / "out")("Hello there")["input_ids"] == \
        load_vocab_file(tmp_path / "out" / "vocab.txt").encode("Hello there").ids


def test_hf_directory_round_trip_through_the_export_command(tmp_path, capsys):
    assert export_main([str(MINILM), str(tmp_path / "out")]) == 0
    assert "as BertModel" in capsys.readouterr().out
    original, exported = load_checkpoint(MINILM), load_checkpoint(tmp_path / "out")
    assert original.config == exported.config and original.vocab == exported.vocab
    assert set(original.state_dict) == set(exported.state_dict)
    for key, value in original.state_dict.items():
        assert torch.equal(value, exported.state_dict[key]), key
    theirs, info = transformers.BertModel.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # nothing is overwritten
    assert export_main([str(MINILM), str(tmp_path / "out")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_bf16_export_in_shards_loads_back_here_and_in_transformers(tmp_path):
    from safetensors.torch import load_file, save_file

    from bert_exp.runner.run_dir import weights_sha256

    out = tmp_path / "out"
    assert export_main([str(MINILM), str(out), "--dtype", "bf16", "--max-shard-size", "4MB"]) == 0
    shards = sorted(out.glob("model-*.safetensors"))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert not (out / "model.safetensors").exists() and len(shards) > 2
    assert sorted(set(index["weight_map"].values())) == [shard.name for shard in shards]
    for shard in shards:  # within the limit, but for a tensor larger than it alone (the word embeddings)
        tensors = load_file(shard)
        assert len(tensors) == 1 or sum(t.numel() * t.element_size() for t in tensors.values()) <= 4 << 20
    original, exported = load_checkpoint(MINILM), load_checkpoint(out)
    assert original.config == exported.config and original.vocab == exported.vocab
    assert set(original.state_dict) == set(exported.state_dict)
    for key, value in original.state_dict.items():
        assert torch.equal(value.to(torch.bfloat16), exported.state_dict[key]), key
    theirs, info = transformers.BertModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    # a model initialised from it records one sha256 of all its shards, which changes with any of them
    recorded = weights_sha256(out)
    tensors = load_file(shards[-1])
    save_file({k: v + 1 for k, v in tensors.items()}, str(shards[-1]), metadata={"format": "pt"})
    assert recorded and weights_sha256(out) != recorded
    shards[0].unlink()
    with pytest.raises(CheckpointError, match=f"names {shards[0].name}, which .* lacks"):
        load_checkpoint(out)


def test_pytorch_model_bin_and_tokenizer_json(tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    shutil.copy(MINILM / "config.json", directory)
    shutil.copy(MINILM / "tokenizer.json", directory)
    original = load_checkpoint(MINILM)
    state = {k.removeprefix("bert."): v for k, v in original.state_dict.items()}
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in state.items()}  # old-style names are accepted too
    torch.save(state, directory / "pytorch_model.bin")
    loaded = load_checkpoint(directory)
    assert loaded.vocab == original.vocab
    assert set(loaded.state_dict) == set(original.state_dict)


def test_mismatches_are_clear_errors(tmp_path):
    ckpt = load_checkpoint(MINILM)
    small = ckpt.config.__class__(**{**ckpt.config.to_dict(), "hidden_size": 128, "num_attention_heads": 2,
                                      "intermediate_size": 512})
    module = ClassificationModule(small, optim=OptimSettings(partial(torch.optim.AdamW)))
    with pytest.raises(CheckpointError, match=r"model.hidden_size=128 but the checkpoint has 384"):
        module.initialise_from(ckpt)
    other_vocab = ckpt.config.__class__(**{**ckpt.config.to_dict(), "vocab_size": 8192})
    with pytest.raises(CheckpointError, match=r"model.vocab_size=8192"):
        ClassificationModule(other_vocab, optim=OptimSettings(partial(torch.optim.AdamW))).initialise_from(ckpt)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="neither a HuggingFace directory"):
        load_checkpoint(tmp_path / "empty")
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match="neither model.safetensors nor pytorch_model.bin"):
        load_checkpoint(tmp_path / "cfg")


def test_our_own_config_fields_stay_out_of_the_exported_config_json(tmp_path):
    from bert_exp.model import BertConfig, BertForPreTraining
    from bert_exp.model.hf import hf_config_dict

    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, initializer="truncated_normal")
    exported = hf_config_dict(Checkpoint(config, {}, head="pretraining"))
    assert "initializer" not in exported and exported["initializer_range"] == 0.02
    assert set(exported) - set(transformers.BertConfig().to_dict()) <= {"architectures", "position_embedding_type"}
    model = BertForPreTraining(config)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(95)]
    save_hf_directory(Checkpoint(config, model.state_dict(), vocab, True, "pretraining"), tmp_path / "out")
    assert "initializer" not in json.loads((tmp_path / "out" / "config.json").read_text())
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not hasattr(theirs.config, "initializer")
