"""Two machines, simulated on loopback: torchrun starts two "nodes" (--nnodes=2, one CPU process each,
gloo), each with a cache of its own as real machines have, sharing the run directory. Both arrangements
of the prepared data: each node's own copy in its own cache (the default; the nodes prepare with other
numbers of workers, and on the resume each finds in its cache a copy made with the other's count), and
one copy in a directory the nodes share, each node preparing its share of the groups. Each run ends with
one run directory, one run.json, one vocabulary, finite losses, and it resumes."""

import csv
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = pytest.mark.slow

COMMAND = ["+experiment=pretrain_tiny", "hardware=ddp_cpu", "trainer.devices=1", "trainer.num_nodes=2",
           "data.files=[${paths.data_dir}/corpus/inaugural/19*.txt]", "data.tokenizer.vocab_size=2000",
           "data.prepare.group_bytes=100KB", "trainer.val_check_interval=5",
           "trainer.limit_val_batches=2", "trainer.log_every_n_steps=1", "logger=csv"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_two_nodes(tmp_path: Path, data_dir: Path, extra: list[str], shared: Path | None = None,
                     per_node: tuple[list[str], list[str]] = ([], [])) -> list[str]:
    """Both nodes' torchrun, at once (``shared``: the prepared data's directory, which both nodes share;
    None: each node's own cache); returns what each printed to stderr."""
    port = free_port()
    processes = []
    for node in (0, 1):
        env = {**os.environ, "BERT_EXP_DATA": str(data_dir), "BERT_EXP_CACHE": str(tmp_path / f"node{node}-cache"),
               "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                   f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}", "-m", "bert_exp",
                   *COMMAND, *([f"data.prepare.dir={shared}", "data.prepare.across_nodes=true"] if shared else []),
                   *extra, *per_node[node]]
        processes.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    outputs = [process.communicate(timeout=600)[1] for process in processes]
    for node, (process, err) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"node {node}:\n{err[-4000:]}"
    return outputs


def train_losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}


def test_two_nodes_prepare_train_and_resume_as_one_run(data_dir, tmp_path):
    shared, run_dir, resumed = tmp_path / "shared-prepared", tmp_path / "run", tmp_path / "resumed"
    launch_two_nodes(tmp_path, data_dir, ["trainer.max_steps=10", f"hydra.run.dir={run_dir}"], shared)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 10 and info["host"]["world_size"] == 2
    assert len(list(tmp_path.glob("**/run.json"))) == 1  # one run directory, one run.json
    losses = train_losses(run_dir)
    assert len(losses) == 10 and all(math.isfinite(v) for v in losses.values())
    # the vocabulary was trained once, on node 0; node 1 received it (and the inputs' hashes)
    assert list((tmp_path / "node0-cache" / "tokenizers").iterdir())
    assert not (tmp_path / "node1-cache" / "tokenizers").exists()
    # both nodes prepared their part of the groups, merged into one dataset; nothing else was prepared
    (dataset,) = [p for p in shared.iterdir()]
    meta = json.loads((dataset / "meta.json").read_text())
    assert meta["report"]["files"] == 25 and meta["vocabulary_sha256"]
    assert not (tmp_path / "node0-cache" / "prepared").exists() and not (tmp_path / "node1-cache" / "prepared").exists()
    assert info["data_report"]["prepared"] == str(dataset)
    # a working resume, on both nodes
    launch_two_nodes(tmp_path, data_dir, ["trainer.max_steps=14", f"ckpt_path={run_dir}", f"hydra.run.dir={resumed}"],
                     shared)
    again = json.loads((resumed / "run.json").read_text())
    assert again["status"] == "finished" and again["global_step"] == 14
    continued = train_losses(resumed)
    assert min(continued) >= 10 and all(math.isfinite(v) for v in continued.values())  # continued, not restarted


def test_two_nodes_with_caches_of_their_own_train_and_resume(data_dir, tmp_path):
    """The default recipe (docs/scaling-out.md): nothing shared but the run directory. Each node prepares
    the data into its own cache, node 0 with 2 workers and node 1 with 1: the copies are the same data
    (the ranks compare their identities before the first step), byte for byte."""
    run_dir, resumed = tmp_path / "run", tmp_path / "resumed"
    workers = (["data.prepare.num_workers=2"], ["data.prepare.num_workers=1"])
    launch_two_nodes(tmp_path, data_dir, ["trainer.max_steps=6", f"hydra.run.dir={run_dir}"], per_node=workers)
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["global_step"] == 6 and info["host"]["world_size"] == 2
    assert all(math.isfinite(v) for v in train_losses(run_dir).values())
    copies = [next((tmp_path / f"node{node}-cache" / "prepared").iterdir()) for node in (0, 1)]
    assert copies[0].name == copies[1].name  # the same key
    metas = [json.loads((copy / "meta.json").read_text()) for copy in copies]
    assert metas[0]["identity"] == metas[1]["identity"]
    assert metas[0]["splits"]["train"]["chunks"] > 2
    for split in ("train", "val"):
        chunks = [{p.name: p.read_bytes() for p in (copy / split).glob("chunk-*.bin")} for copy in copies]
        assert chunks[0] == chunks[1]
    assert not (tmp_path / "node1-cache" / "tokenizers").exists()  # the vocabulary came from node 0
    # the resume: each node's cache holds a copy made with the other node's number of workers
    made = [(copy / "meta.json").stat().st_mtime_ns for copy in copies]
    launch_two_nodes(tmp_path, data_dir, ["trainer.max_steps=8", f"ckpt_path={run_dir}", f"hydra.run.dir={resumed}"],
                     per_node=workers[::-1])
    again = json.loads((resumed / "run.json").read_text())
    assert again["status"] == "finished" and again["global_step"] == 8
    assert min(train_losses(resumed)) >= 6
    assert [(copy / "meta.json").stat().st_mtime_ns for copy in copies] == made  # used as they were
