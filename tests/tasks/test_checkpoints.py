"""Our .ckpt files record their head by a stable name: a renamed task class still exports and initialises
with its head; unreadable files are one error naming the file."""

import json
from functools import partial

import pytest
import torch
import transformers

from bert_exp.model import BertConfig
from bert_exp.model.hf import CheckpointError
from bert_exp.tasks import ClassificationModule
from bert_exp.tasks.checkpoints import checkpoint_config, load_checkpoint
from bert_exp.tools.export import main as export_main
from bert_exp.tasks import OptimSettings, Vocabulary

TINY = BertConfig(vocab_size=64, num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(59)]


class SentenceLabeller(ClassificationModule):
    """ClassificationModule under another class name, as after a rename."""


def save_like_lightning(module, path):
    checkpoint = {"state_dict": {f"model.{k}": v for k, v in module.model.state_dict().items()}, "global_step": 7}
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, path)
    return path


def test_renamed_task_class_keeps_its_head_for_export_and_init_from(tmp_path):
    torch.manual_seed(0)
    module = SentenceLabeller(TINY, optim=OptimSettings(partial(torch.optim.AdamW)), num_labels=3, vocabulary=Vocabulary(VOCAB))
    path = save_like_lightning(module, tmp_path / "renamed.ckpt")
    assert torch.load(path, weights_only=True)["head"] == "classification"

    ckpt = load_checkpoint(path)
    assert ckpt.head == "classification" and ckpt.num_labels == 3 and ckpt.vocab == VOCAB
    assert checkpoint_config(path) == ckpt.config  # the config alone, weights unread (model=from_checkpoint)

    assert export_main([str(path), str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and len(config["id2label"]) == 3
    theirs, info = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]

    fresh = ClassificationModule(TINY, optim=OptimSettings(partial(torch.optim.AdamW)), num_labels=3, vocabulary=Vocabulary(VOCAB))
    fresh.initialise_from(ckpt)
    assert fresh.fresh_parameters == []  # the classifier came from the checkpoint too
    torch.testing.assert_close(fresh.model.classifier.weight, module.model.classifier.weight)


@pytest.mark.parametrize("content", [b"", b"\x00" * 100, b"PK\x03\x04 not really a zip", "truncated"])
def test_unreadable_checkpoint_is_one_error_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.ckpt"
    if content == "truncated":
        module = ClassificationModule(TINY, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(VOCAB))
        whole = save_like_lightning(module, tmp_path / "whole.ckpt").read_bytes()
        content = whole[: len(whole) // 2]
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=r"bad\.ckpt: not a readable checkpoint") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)
    assert export_main([str(path), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
