"""tests/gpu/pretrain.sh end to end on the CPU (DEVICE=cpu): the steps it takes on a lent GPU (the corpus
check, the preparation run, pre-training, the bf16 export, what goes into $OUT), with BERT-tiny on two
Gutenberg books (.txt.xz, a list of globs as FILES takes it: a Wikipedia part took 25 s to prepare)
and a budget in tokens, so that nothing asserted depends on the machine's speed."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from bert_exp.tasks.checkpoints import load_checkpoint

SCRIPT = Path(__file__).resolve().parent / "pretrain.sh"


@pytest.mark.slow
@pytest.mark.data
def test_the_gpu_pretraining_script_brings_the_model_back(data_dir, cache_dir, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "MINUTES": "1", "BUDGET": "150k", "OUT": str(out),
           "WORK": str(tmp_path / "work"), "BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache_dir),
           "FILES": ",".join(str(data_dir / "corpus" / "gutenberg" / f"{author}*.txt.xz")
                             for author in ("alcott-louisa-may--a-modern", "alcott-louisa-may--an-old")),
           "PYTHON": sys.executable}
    result = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]

    # what a GPU machine returns: at most 8 files, each under 16 MiB, no deeper than two folders
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8, files
    assert all((out / f).stat().st_size < 16 << 20 and f.count("/") <= 2 for f in files), files
    assert {"run.json", "logs.tar.gz", "summary.txt", "model/config.json", "model/model.safetensors",
            "model/vocab.txt"} <= set(files), files

    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "finished" and info["experiment"] == "pretrain_budget_gpu"
    assert info["throughput"]["train_tokens"] >= 150_000  # the budget, in tokens, was spent
    summary = (out / "summary.txt").read_text()
    for step in ("imports", "corpus", "prepare", "pretrain", "export"):
        assert f"{step}: rc=0" in summary, summary

    model = load_checkpoint(out / "model")  # bf16 weights, the tiny shape, the run's vocabulary
    assert model.config.hidden_size == 128 and model.config.layer_norm_position == "post"
    assert model.vocab is not None and len(model.vocab) == model.config.vocab_size
    assert {t.dtype for t in model.state_dict.values() if t.is_floating_point()} == {torch.bfloat16}

    with tarfile.open(out / "logs.tar.gz") as logs:
        names = logs.getnames()
    assert "./logs/pretrain.log" in names and "./run/run.json" in names
    assert not any(name.endswith(".ckpt") for name in names)
