"""Composing the real config tree in tests, and running the CLI."""

import os
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

import bert_exp.runner.resolvers  # noqa: F401
from bert_exp.resources import resource_dir
from warm_python import run_module

REPO = Path(__file__).resolve().parent.parent


def compose_config(overrides: list[str], run_dir: Path | None = None):
    """The config ``python -m bert_exp OVERRIDES`` would run, with ``paths.run_dir`` at ``run_dir``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(resource_dir("conf"))):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    if run_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(run_dir)
        HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def cli_environment(env: dict | None = None) -> dict:
    """The environment of the tests' CLI runs: this process's, W&B offline and quiet, then ``env``."""
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", **(env or {})}


def run_cli(args: list[str], cwd: Path | None = None, timeout: int = 600, env: dict | None = None,
            fresh: bool = False, module: str = "bert_exp"):
    """``python -m bert_exp ARGS`` (or ``-m MODULE``), its output captured; forked from a warm interpreter
    unless ``fresh`` or the environment asks for a fresh one (warm_python.py says when)."""
    return run_module(args, cwd or REPO, cli_environment(env), timeout, fresh, module)


def tiny_hf_directory(path: Path) -> Path:
    """A one-layer BERT with MiniLM's vocabulary, saved as a HuggingFace directory (seeded: the same bytes)."""
    import torch

    from bert_exp.model import BertConfig, BertForPreTraining
    from bert_exp.model.hf import Checkpoint, save_hf_directory
    from bert_exp.resources import minilm_dir

    vocab = (minilm_dir() / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    config = BertConfig(vocab_size=len(vocab), num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                        intermediate_size=64)
    torch.manual_seed(0)
    save_hf_directory(Checkpoint(config, BertForPreTraining(config).state_dict(), vocab, True, "pretraining"), path)
    return path


def is_png(path: Path) -> bool:
    """A PNG file with something drawn in it (an empty figure is a few kB)."""
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def synthetic_samples(n, seed=0, max_len=128):
    """[CLS] A [SEP] B [SEP] samples of varied lengths, with ids that are never special."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        a, b = rng.integers(1, max_len // 2 - 2, size=2)
        ids = np.concatenate([[2], rng.integers(5, 30522, a), [3], rng.integers(5, 30522, b), [3]])
        samples.append({"input_ids": ids, "token_type_ids": np.r_[np.zeros(a + 2), np.ones(b + 1)].astype(int),
                        "next_sentence_label": int(rng.integers(0, 2))})
    return samples


def perturb(model, seed: int = 0):
    """Every parameter of a model moved off its initial value (norms and biases included), eval mode: weights
    under which a parity test sees every parameter's part."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def cola_pairs_batch(data_dir: Path, n: int = 8) -> tuple[dict, list[str]]:
    """Real text for parity checks: the first ``n`` CoLA dev sentences, each paired with the next,
    tokenized with the all-MiniLM-L6-v2 vocabulary and padded. Returns (batch of tensors, vocabulary)."""
    import torch

    from bert_exp.data.tokenizer import load_vocab_file
    from bert_exp.model.hf import read_vocab_file
    from bert_exp.resources import minilm_dir

    lines = (data_dir / "cola" / "raw" / "in_domain_dev.tsv").read_text(encoding="utf-8").splitlines()
    sentences = [line.split("\t")[3] for line in lines[: n + 1]]
    tokenizer = load_vocab_file(minilm_dir() / "vocab.txt")
    tokenizer.enable_padding(pad_id=0)
    encodings = tokenizer.encode_batch(list(zip(sentences[:n], sentences[1:])))
    batch = {name: torch.tensor([getattr(e, attr) for e in encodings])
             for name, attr in (("input_ids", "ids"), ("token_type_ids", "type_ids"), ("attention_mask", "attention_mask"))}
    assert (batch["attention_mask"] == 0).any() and (batch["token_type_ids"] == 1).any()
    return batch, read_vocab_file(minilm_dir() / "vocab.txt")


USER_PRESET = """# @package _global_
# CoLA from MiniLM with a data config of my own
defaults:
  - /experiment/cola_minilm
  - override /data: my_cola_data

experiment_name: my_cola
seed: 7
"""
USER_DATA = """# CoLA's files, read as my project reads them
defaults:
  - cola

max_seq_length: 64
"""


def user_project(root: Path) -> Path:
    """A project's config directory laid out as conf/ is: one preset extending a shipped one, one data config."""
    conf = root / "myconf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "data").mkdir()
    (conf / "experiment" / "my_cola.yaml").write_text(USER_PRESET)
    (conf / "data" / "my_cola_data.yaml").write_text(USER_DATA)
    return conf
