"""Every reader, given a truncated, garbled or wrongly encoded file, stops with one UserError naming the
file, never a traceback of another kind."""

import io
import json
import random

import pytest
import torch

from bert_exp.data.tasks.glue import read_examples
from bert_exp.data.tasks.squad import read_squad
from bert_exp.data.tokenizer import load_vocab_file
from bert_exp.errors import UserError
from bert_exp.tasks.checkpoints import load_checkpoint

TSV = "gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.\n" * 3
SQUAD = json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{
    "context": "The cat sat on the mat.", "qas": [
        {"id": "q1", "question": "Where did the cat sit?", "answers": [{"text": "on the mat", "answer_start": 12}]},
        {"id": "q2", "question": "Who sat?", "answers": [{"text": "The cat", "answer_start": 0}]}]}]}]})
VOCAB = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "##s"]) + "\n"


def checkpoint_bytes() -> bytes:
    buffer = io.BytesIO()
    torch.save({"bert_config": {"hidden_size": 8}, "state_dict": {"model.w": torch.zeros(64)}}, buffer)
    return buffer.getvalue()


def variants(good: bytes) -> dict[str, bytes]:
    """Damaged versions of a good file: truncated at several points, random bytes, other encodings."""
    rng = random.Random(0)
    out = {"empty": b"", "garbage": bytes(rng.randrange(256) for _ in range(300)),
           "nul bytes": b"\x00" * 64, "utf-16": good.decode("utf-8", "replace").encode("utf-16")}
    for fraction in (0.1, 0.33, 0.5, 0.77, 0.95):
        out[f"truncated at {fraction:.0%}"] = good[: int(len(good) * fraction)]
    flipped = bytearray(good)
    for i in rng.sample(range(len(flipped)), max(1, len(flipped) // 20)):
        flipped[i] = rng.randrange(128, 256)
    out["bytes flipped (latin-1 like)"] = bytes(flipped)
    return out


READERS = {
    "tsv": (TSV.encode(), "train.tsv", lambda p: read_examples(p, [3], 1, 2, num_columns=4)),
    "squad": (SQUAD.encode(), "dev.json", read_squad),
    "vocab": (VOCAB.encode(), "vocab.txt", load_vocab_file),
    "checkpoint": (checkpoint_bytes(), "last.ckpt", load_checkpoint),
}
CASES = [(reader, name) for reader, (good, _, _) in READERS.items() for name in variants(good)]


@pytest.mark.parametrize("reader, variant", CASES)
def test_a_damaged_file_is_one_error_naming_it(tmp_path, reader, variant):
    good, filename, read = READERS[reader]
    path = tmp_path / filename
    path.write_bytes(variants(good)[variant])
    try:
        read(path)
    except UserError as err:
        assert str(path) in str(err), err
    # a damaged file may still read as a smaller valid one (a truncated TSV): no crash is what counts


def test_a_latin1_or_utf16_tsv_names_the_file_line_and_encoding(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes("gj04\t1\t\tThe caf\u00e9 closed.\n".encode("latin-1"))
    with pytest.raises(UserError, match=rf"{path}:1: .*UTF-8"):
        read_examples(path, [3], 1, 2, num_columns=4)
    path.write_bytes(TSV.encode("utf-16"))
    with pytest.raises(UserError, match=rf"{path}:1: .*UTF-8"):
        read_examples(path, [3], 1, 2, num_columns=4)


def test_a_truncated_squad_file_names_the_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(SQUAD[: len(SQUAD) // 2])
    with pytest.raises(UserError, match=rf"{path}:1: not valid JSON"):
        read_squad(path)
