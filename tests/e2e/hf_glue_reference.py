"""GLUE side by side: bert_exp's ``glue_<task>_minilm_local`` (or ``glue_wnli_minilm``) runs and transformers'
``AutoModelForSequenceClassification`` fine-tuned from the same checkpoint with the same recipe on the same
rows, for several seeds, in one run of this script; both scored on the same validation sets.

Same on both sides: all-MiniLM-L6-v2 (its encoder and pooler; each side initialises the new classifier its
own way), the rows and their encoding (bert_exp's ``GlueDataModule`` for the preset: [CLS] A [SEP] B [SEP],
cut at 128 tokens), batch 32, 3 epochs, AdamW (eps 1e-6, weight decay 0.01 except biases and LayerNorm),
lr 2e-5 with 10 % linear warm-up then linear decay, clipping at 1.0, dropout 0.1, the precision, the seed.
The transformers side is transformers' model and loss (cross-entropy; mean squared error with one label), a
plain PyTorch loop in random order, and accuracy / F1 (scikit-learn) or Pearson / Spearman (scipy).

    python tests/e2e/hf_glue_reference.py --tasks stsb rte --seeds 42 43 44 --out glue_side_by_side.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
PRESETS = {"rte": "glue_rte_minilm_local", "mrpc": "glue_mrpc_minilm_local", "stsb": "glue_stsb_minilm_local",
           "wnli": "glue_wnli_minilm"}


def datamodule(preset: str):
    """The preset's rows, encoded by bert_exp, and its config."""
    from hydra.utils import instantiate

    from bert_exp.resources import minilm_dir

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import compose_config

    cfg = compose_config([f"+experiment={preset}", f"data.vocab_file={minilm_dir() / 'vocab.txt'}", "data.download=false"])
    dm = instantiate(cfg.data)
    dm.setup()
    return dm, cfg


def batches(rows, size, order, dtype):
    for start in range(0, len(order), size):
        chunk = [rows[i] for i in order[start:start + size]]
        width = max(len(r["input_ids"]) for r in chunk)
        pad = [width - len(r["input_ids"]) for r in chunk]
        yield {"input_ids": torch.tensor([r["input_ids"] + [0] * p for r, p in zip(chunk, pad)]),
               "token_type_ids": torch.tensor([r["token_type_ids"] + [0] * p for r, p in zip(chunk, pad)]),
               "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * p for r, p in zip(chunk, pad)]),
               "labels": torch.tensor([r["label"] for r in chunk], dtype=dtype)}


def scores(predictions: np.ndarray, labels: np.ndarray, metrics: list[str]) -> dict[str, float]:
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    out = {}
    for name in metrics:
        if name == "acc":
            out[name] = accuracy_score(labels, predictions)
        elif name == "f1":
            out[name] = f1_score(labels, predictions)
        elif name == "mcc":
            out[name] = matthews_corrcoef(labels, predictions)
        elif name == "pearson":
            out[name] = pearsonr(predictions, labels)[0]
        elif name == "spearman":
            out[name] = spearmanr(predictions, labels)[0]
    return {k: float(v) for k, v in out.items()}


def train_transformers(dm, cfg, args, seed: int) -> dict:
    import transformers

    from bert_exp.resources import minilm_dir
    from hf_reference import fit

    torch.manual_seed(seed)
    num_labels = cfg.data.num_labels
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(minilm_dir()), num_labels=num_labels, problem_type="regression" if num_labels == 1 else None)
    train = dm.datasets["train"]
    dtype = torch.float32 if num_labels == 1 else torch.int64
    rng = random.Random(seed)

    def epoch_batches():
        order = list(range(len(train)))
        rng.shuffle(order)
        return batches(train, args.batch_size, order, dtype)

    tokens, seconds = fit(model, epoch_batches, args.epochs, math.ceil(len(train) / args.batch_size), args.lr,
                          args.precision)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")
    model.eval()
    result = {}
    for name in dm.val_files:
        rows = dm.datasets[name]
        outputs, labels = [], []
        with torch.no_grad(), autocast:
            for batch in batches(rows, 64, list(range(len(rows))), dtype):
                logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()
                outputs.append(logits.squeeze(-1) if num_labels == 1 else logits.argmax(-1))
                labels.append(batch["labels"])
        metrics = scores(torch.cat(outputs).numpy(), torch.cat(labels).numpy(), list(cfg.task.module.metrics))
        result.update({f"{name}/{k}": v for k, v in metrics.items()})
    return {**result, "train_tokens_per_sec": tokens / seconds, "train_seconds": seconds,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run_ours(preset: str, args, seed: int, run_dir: Path) -> dict:
    command = [sys.executable, "-m", "bert_exp", f"+experiment={preset}", f"seed={seed}",
               f"global_batch_size={args.batch_size}", f"trainer.max_epochs={args.epochs}",
               f"optim.optimizer.lr={args.lr}", f"precision={args.precision}", "logger=csv",
               "callbacks.last_checkpoint.keep_after_finish=false", f"hydra.run.dir={run_dir}"]
    print("ours:", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    info = json.loads((run_dir / "run.json").read_text())
    metrics = info["metrics"]
    result = {key.removeprefix("val/"): value for key, value in metrics.items() if key.count("/") == 2}
    throughput = info["throughput"]
    return {**result, "train_tokens_per_sec": throughput["tokens_per_sec"], "train_seconds": throughput["train_seconds"],
            "peak_rss_gib": throughput.get("peak_rss_mib", math.nan) / 1024}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["stsb", "rte"], choices=sorted(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="bf16-mixed")
    parser.add_argument("--run-dir", default="outputs/glue_side_by_side", help="where our runs go")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    results: dict = {"args": vars(args)}
    for task in args.tasks:
        preset = PRESETS[task]
        dm, cfg = datamodule(preset)
        print(f"{task}: {len(dm.datasets['train'])} training rows, validation {', '.join(dm.val_files)}", flush=True)
        for seed in args.seeds:
            ours = run_ours(preset, args, seed, Path(args.run_dir).resolve() / f"{task}-seed{seed}")
            theirs = train_transformers(dm, cfg, args, seed)
            results.setdefault(task, {})[seed] = {"bert_exp": ours, "transformers": theirs}
            print(f"{task} seed {seed}: bert_exp {json.dumps(ours)}\n{task} seed {seed}: transformers "
                  f"{json.dumps(theirs)}", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(results, indent=1))
        monitored = f"{next(iter(dm.val_files))}/{cfg.task.monitor.split('/')[-1]}"
        for side in ("bert_exp", "transformers"):
            values = [results[task][s][side][monitored] for s in args.seeds]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            print(f"| {task} {monitored} | {side} | " + ", ".join(f"{v:.4f}" for v in values)
                  + f" | mean {statistics.mean(values):.4f} (sd {spread:.4f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
