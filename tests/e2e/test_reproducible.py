"""The same command twice, from nothing, gives the same run: each in a fresh cache and a fresh interpreter
with its own hash seed, the vocabulary, the prepared data (every chunk, index and count) and the training
losses (bitwise, on the CPU) come out equal. What could differ between two processes (the vocabulary
trainer's hash maps, set and dict order, the order files are found in, the loader workers' seeds) would
show here."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

COMMAND = ["+experiment=pretrain_tiny", "data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]",
           "data.tokenizer.vocab_size=2000", "trainer.max_steps=20", "trainer.val_check_interval=10",
           "trainer.limit_val_batches=2", "trainer.log_every_n_steps=1", "data.loader.num_workers=1", "logger=csv",
           "data.prepare.group_bytes=200KB"]  # several groups, prepared by two worker processes
TIMINGS = ("build_seconds", "tokens_per_second")


def run_fresh(tmp_path: Path, name: str, data_dir: Path, hash_seed: int) -> tuple[Path, Path]:
    cache, run_dir = tmp_path / f"cache-{name}", tmp_path / f"run-{name}"
    env = {**os.environ, "BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(cache), "WANDB_MODE": "offline",
           "PYTHONHASHSEED": str(hash_seed)}
    result = subprocess.run([sys.executable, "-m", "bert_exp", *COMMAND, f"hydra.run.dir={run_dir}"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return cache, run_dir


def prepared_files(cache: Path) -> dict[str, bytes]:
    """Every file of the prepared dataset, by its path inside it; in the JSON files the times of the build
    (litdata's index stamp, our preparation's seconds) left out."""
    (dataset,) = [p for p in (cache / "prepared").iterdir() if not p.name.startswith(".")]
    files = {}
    for path in sorted(dataset.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "index.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k != "updated_at"}).encode()
            elif path.name == "meta.json":
                meta = json.loads(data)
                meta["report"] = {k: v for k, v in meta["report"].items() if k not in TIMINGS}
                data = json.dumps(meta, sort_keys=True).encode()
            files[str(path.relative_to(dataset))] = data
    return files


def losses(run_dir: Path) -> dict[int, str]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def test_the_same_command_in_two_fresh_caches_gives_the_same_run(data_dir, tmp_path):
    first_cache, first = run_fresh(tmp_path, "first", data_dir, hash_seed=11)
    second_cache, second = run_fresh(tmp_path, "second", data_dir, hash_seed=22)
    assert (first / "vocab.txt").read_bytes() == (second / "vocab.txt").read_bytes()
    one, other = prepared_files(first_cache), prepared_files(second_cache)
    assert len([name for name in one if name.endswith(".bin")]) >= 2  # chunks of both splits
    assert one.keys() == other.keys()
    for name in one:
        assert one[name] == other[name], name
    meta = json.loads(one["meta.json"])
    assert meta["report"]["files"] == 25 and len(meta["inputs"]) == 25
    assert losses(first) == losses(second) and len(losses(first)) == 20  # the same strings: bitwise equal
    info = json.loads((first / "run.json").read_text())
    assert info["data_report"]["tokens"] == meta["report"]["tokens"] > 50_000
