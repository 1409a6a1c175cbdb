"""python -m bert_exp.attention: the Clark et al. statistics on hand-made patterns, and the PNGs and JSON
written for a small checkpoint."""

import json
import math
from functools import partial

import numpy as np
import pytest
import torch
from helpers import is_png

from bert_exp.model import BertConfig
from bert_exp.tasks import ClassificationModule
from bert_exp.tools.attention import attention_statistics, main
from bert_exp.tasks import OptimSettings, Vocabulary

TOKENS = ["[CLS]", "a", "b", "c", "[SEP]"]


def hand_made() -> np.ndarray:
    """1 layer, 4 heads over 5 tokens: all on [CLS]; uniform; previous token (the first on itself);
    half on [SEP], half on the next token (wholly on [SEP] when that is the next)."""
    n = len(TOKENS)
    a = np.zeros((1, 4, n, n))
    a[0, 0, :, 0] = 1
    a[0, 1] = 1 / n
    a[0, 2, 0, 0] = 1
    for q in range(1, n):
        a[0, 2, q, q - 1] = 1
    for q in range(n):
        a[0, 3, q, 4] += 0.5
        a[0, 3, q, min(q + 1, 4)] += 0.5
    return a


def test_statistics_of_hand_made_heads():
    s = attention_statistics(hand_made(), TOKENS)
    n = len(TOKENS)
    entropy = s["entropy"][0]
    assert entropy[0] == 0 and entropy[1] == pytest.approx(math.log(n)) and entropy[2] == 0
    assert entropy[3] == pytest.approx(3 / 5 * math.log(2))  # "c" and [SEP] look only at [SEP]
    assert s["cls"][0] == pytest.approx([1, 1 / n, 1 / n + 1 / n, 0])  # head 2: [CLS] itself, and "a" looking back
    assert s["sep"][0] == pytest.approx([0, 1 / n, 0, (3 * 0.5 + 2) / n])
    assert s["self"][0] == pytest.approx([1 / n, 1 / n, 1 / n, 1 / n])  # head 4: [SEP] on itself
    assert s["previous"][0] == pytest.approx([0.25, 1 / n, 1, 0])
    assert s["next"][0] == pytest.approx([0, 1 / n, 0, (3 * 0.5 + 1) / 4])
    received = np.array(s["received"])
    assert received.sum() == pytest.approx(1) and received.argmax() == 0  # [CLS] gets the most
    assert s["max_entropy"] == pytest.approx(math.log(n))


def test_statistics_refuse_a_shape_that_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        attention_statistics(hand_made(), TOKENS[:-1])


def test_command_writes_heatmaps_and_json(tmp_path, capsys):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "."]
    config = BertConfig(vocab_size=len(vocab), num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    module = ClassificationModule(config, optim=OptimSettings(partial(torch.optim.AdamW)), vocabulary=Vocabulary(vocab))
    checkpoint = {"state_dict": {f"model.{k}": v for k, v in module.model.state_dict().items()}}
    module.on_save_checkpoint(checkpoint)
    torch.save(checkpoint, tmp_path / "tiny.ckpt")

    out = tmp_path / "att"
    assert main([str(tmp_path / "tiny.ckpt"), "the cat sat on the mat .", "--layer", "2", "--head", "3",
                 "--out", str(out)]) == 0
    assert "wrote 2 PNGs" in capsys.readouterr().out
    assert is_png(out / "layer_2.png") and is_png(out / "layer_2_head_3.png")
    record = json.loads((out / "attention.json").read_text())
    assert record["tokens"][0] == "[CLS]" and len(record["tokens"]) == 9
    probs = np.array(record["attention"])
    assert probs.shape == (9, 9) and np.allclose(probs.sum(-1), 1, atol=1e-5)
    assert np.array(record["entropy"]).shape == (2, 4) and len(record["received"]) == 9

    assert main([str(tmp_path / "tiny.ckpt"), "the cat", "--layer", "3", "--out", str(out)]) == 2
    assert "layers 1..2" in capsys.readouterr().err
