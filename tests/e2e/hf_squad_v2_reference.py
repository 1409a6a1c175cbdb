"""SQuAD 2.0 side by side: bert_exp's ``squad_v2_minilm_local`` run and transformers'
``AutoModelForQuestionAnswering`` fine-tuned from the same checkpoint, with the same recipe, on the same
windows, in one run of this script; both scored with the official v2.0 metric (``bert_exp.metrics.squad``,
which ``tests/data/test_squad_v2_official.py`` holds equal to ``evaluate-v2.0.py``).

Same on both sides: all-MiniLM-L6-v2, the split (data=squad_v2_local: dev-v1.1.json's answerable questions
and dev-v2.0-half.json's unanswerable ones on 42 articles to train, 4 articles scored, 2 held out on which the
null-score threshold is tuned), the windows (``bert_exp.data.tasks.squad.make_features``: the question, then windows
of the context ``--doc-stride`` apart; unanswerable questions and answers outside a window point at [CLS]),
batch, epochs, AdamW (fused, eps 1e-6, weight decay 0.01 except biases and LayerNorm), 10 % linear warm-up
then linear decay, clipping at 1.0, the precision, the seed. The transformers side is transformers' model
and loss, a plain PyTorch loop, and the post-processing of transformers' question-answering example
(``examples/pytorch/question-answering/utils_qa.py``: the null score is the smallest [CLS] score over the
question's windows, the ``n_best`` starts x ends inside the context and at most ``max_answer_length`` long;
"" when the null score beats the best span by more than the threshold; the threshold is the one that scores
best on the held-out articles, as ours). It does not use BERT's max-context
rule (a span may start in any window holding it), which ours does. A third row scores transformers' logits
with bert_exp's own post-processing, so that what is left between it and ours is the training alone; with
``--out``, those logits are kept beside the JSON (``*.transformers_logits.npz``).

    python tests/e2e/hf_squad_v2_reference.py --out squad_v2_side_by_side.json

``--speed-steps N`` measures speed alone: each side trains N steps of the same recipe, one after the other
(no validation, no scores), and the script prints both tokens/s and peak resident memory.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]


def windows(max_length: int, doc_stride: int):
    """The training windows and the evaluator (questions, windows, answer selection, the threshold-tuning
    questions) bert_exp builds for data=squad_v2_local."""
    from hydra.utils import instantiate

    from bert_exp.resources import minilm_dir

    sys.path.insert(0, str(REPO / "tests"))
    from helpers import compose_config

    cfg = compose_config(["+experiment=squad_v2_minilm_local", f"data.max_seq_length={max_length}",
                          f"data.doc_stride={doc_stride}", f"data.vocab_file={minilm_dir() / 'vocab.txt'}",
                          "data.download=false"])
    dm = instantiate(cfg.data)
    dm.setup("fit")
    return dm.train_dataset.features, dm.evaluator


def batches(features, size, order):
    for start in range(0, len(order), size):
        chunk = [features[i] for i in order[start:start + size]]
        width = max(len(f["input_ids"]) for f in chunk)
        batch = {"input_ids": torch.tensor([f["input_ids"] + [0] * (width - len(f["input_ids"])) for f in chunk]),
                 "token_type_ids": torch.tensor([f["token_type_ids"] + [0] * (width - len(f["token_type_ids"]))
                                                 for f in chunk]),
                 "attention_mask": torch.tensor([[1] * len(f["input_ids"]) + [0] * (width - len(f["input_ids"]))
                                                 for f in chunk])}
        if "start_positions" in chunk[0]:
            batch["start_positions"] = torch.tensor([f["start_positions"] for f in chunk])
            batch["end_positions"] = torch.tensor([f["end_positions"] for f in chunk])
        yield batch


def example_postprocess(examples, features, starts, ends, n_best=20, max_answer_length=30, threshold=0.0):
    """transformers' question-answering example's v2.0 post-processing (no max-context rule)."""
    by_example = collections.defaultdict(list)
    for i, feature in enumerate(features):
        by_example[feature.example_index].append(i)
    predictions, null_odds = {}, {}
    for index, example in enumerate(examples):
        null_score, spans = math.inf, []
        for i in by_example[index]:
            offsets, s, e = features[i].offsets, starts[i], ends[i]
            null_score = min(null_score, float(s[0] + e[0]))
            for a in np.argsort(s)[::-1][:n_best]:
                for b in np.argsort(e)[::-1][:n_best]:
                    if a >= len(offsets) or b >= len(offsets) or offsets[a] is None or offsets[b] is None:
                        continue
                    if b < a or b - a + 1 > max_answer_length:
                        continue
                    spans.append((float(s[a] + e[b]), example.context[offsets[a][0]:offsets[b][1]]))
        spans = [span for span in spans if span[1]]
        if not spans:
            predictions[example.qid], null_odds[example.qid] = "", 1e9
            continue
        best_score, best_text = max(spans, key=lambda span: span[0])
        diff = null_score - best_score
        null_odds[example.qid] = diff
        predictions[example.qid] = "" if diff > threshold else best_text
    return predictions, null_odds


def transformers_model(args):
    import transformers

    from bert_exp.resources import minilm_dir

    torch.manual_seed(args.seed)
    return transformers.AutoModelForQuestionAnswering.from_pretrained(str(minilm_dir()))


def speed_transformers(args, train) -> dict:
    """transformers' model trained ``args.speed_steps`` steps of the recipe: its tokens/s and peak memory."""
    from hf_reference import fit

    model, rng = transformers_model(args), random.Random(args.seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    steps = args.speed_steps
    tokens, seconds = fit(model, lambda: batches(train, args.batch_size, order[:steps * args.batch_size]), 1, steps,
                          args.lr, args.precision)
    return {"train_tokens_per_sec": tokens / seconds, "train_seconds": seconds, "train_tokens": tokens,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def speed_ours(args, run_dir: Path) -> dict:
    """bert_exp's run of ``args.speed_steps`` steps of the recipe, validating one question: its tokens/s and peak memory."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    # validation on one question, no threshold tuning: question answering validates whole questions, not batches
    subprocess.run([*ours_command(args, run_dir), f"trainer.max_steps={args.speed_steps}", "+data.limit_val_examples=1",
                    "data.threshold_file=null", "callbacks.last_checkpoint=null"], check=True, cwd=REPO)
    throughput = json.loads((run_dir / "run.json").read_text())["throughput"]
    return {"train_tokens_per_sec": throughput["tokens_per_sec"], "train_seconds": throughput["train_seconds"],
            "train_tokens": throughput["train_tokens"], "peak_rss_gib": throughput["peak_rss_mib"] / 1024}


def train_transformers(args, train, evaluator):
    from bert_exp.metrics.squad import evaluate_v2, tune_null_threshold
    from hf_reference import fit

    model, rng = transformers_model(args), random.Random(args.seed)

    def epoch_batches():
        order = list(range(len(train)))
        rng.shuffle(order)
        return batches(train, args.batch_size, order)

    tokens, train_seconds = fit(model, epoch_batches, args.epochs, math.ceil(len(train) / args.batch_size), args.lr,
                                args.precision)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed")
    model.eval()

    def logits(windows):
        features = [{"input_ids": f.input_ids, "token_type_ids": f.token_type_ids} for f in windows]
        starts, ends = [], []
        with torch.no_grad(), autocast:
            for batch in batches(features, 64, list(range(len(features)))):
                out = model(**batch)
                for row, (s, e) in enumerate(zip(out.start_logits.float().numpy(), out.end_logits.float().numpy())):
                    n = int(batch["attention_mask"][row].sum())
                    starts.append(s[:n])
                    ends.append(e[:n])
        return starts, ends

    selection = evaluator.selection
    tune_logits, eval_logits = logits(evaluator.tune_features), logits(evaluator.features)
    if args.out:  # the logits kept, so that either post-processing can score them again without training
        np.savez_compressed(Path(args.out).with_suffix(".transformers_logits.npz"),
                            **{f"{part}_{name}_{i}": row for part, pair in (("eval", eval_logits), ("tune", tune_logits))
                               for name, rows in zip(("start", "end"), pair) for i, row in enumerate(rows)})
    spans, tune_odds = example_postprocess(evaluator.tune_examples, evaluator.tune_features, *tune_logits,
                                           selection.n_best_size, selection.max_answer_length, math.inf)
    threshold, tune_f1 = tune_null_threshold(evaluator.tune_examples, spans, tune_odds)
    predictions, null_odds = example_postprocess(evaluator.examples, evaluator.features, *eval_logits,
                                                 selection.n_best_size, selection.max_answer_length, threshold)
    scores = evaluate_v2(evaluator.examples, predictions, null_odds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    theirs = {**scores, "null_threshold": threshold, "threshold_f1": tune_f1,
              "train_tokens_per_sec": tokens / train_seconds, "train_seconds": train_seconds, "peak_rss_gib": peak}
    # the same logits through bert_exp's own post-processing (BERT's max-context rule, the threshold tuned the
    # same way): what is left between the two sides is then the training alone
    _, _, post = evaluator.evaluate(eval_logits[0] + tune_logits[0], eval_logits[1] + tune_logits[1])
    rescored = {"exact": post["exact_match"], "f1": post["f1"], "null_threshold": post["null_threshold"],
                "threshold_f1": post["threshold_f1"],
                **{k: v for k, v in post.items() if k.startswith(("HasAns_", "NoAns_", "best_"))}}
    return theirs, {**theirs, **rescored}


def ours_command(args, run_dir: Path) -> list[str]:
    command = [sys.executable, "-m", "bert_exp", "+experiment=squad_v2_minilm_local", f"seed={args.seed}",
               f"global_batch_size={args.batch_size}", f"trainer.max_epochs={args.epochs}",
               f"optim.optimizer.lr={args.lr}", f"data.max_seq_length={args.max_length}",
               f"data.doc_stride={args.doc_stride}", f"precision={args.precision}", "logger=csv",
               f"hydra.run.dir={run_dir}"]
    print("ours:", " ".join(command[1:]), flush=True)
    return command


def run_ours(args, run_dir: Path, evaluator) -> dict:
    subprocess.run(ours_command(args, run_dir), check=True, cwd=REPO)
    return score_run(run_dir, evaluator)


def score_run(run_dir: Path, evaluator) -> dict:
    """A finished run of ours: its predictions and null odds scored as the official script does."""
    from bert_exp.metrics.squad import evaluate_v2

    info = json.loads((run_dir / "run.json").read_text())
    predictions = json.loads((run_dir / "predictions.json").read_text())
    null_odds = json.loads((run_dir / "null_odds.json").read_text())
    scores = evaluate_v2(evaluator.examples, predictions, null_odds)  # the files, scored as the official script does
    metrics = info["metrics"]
    throughput = info["throughput"]
    return {**scores, "null_threshold": metrics["val/null_threshold"], "threshold_f1": metrics["val/threshold_f1"],
            "train_tokens_per_sec": throughput["tokens_per_sec"], "train_seconds": throughput["train_seconds"],
            "peak_rss_gib": throughput.get("peak_rss_mib", math.nan) / 1024}


def report(args, ours: dict | None, theirs: dict, keys: tuple[str, ...], more: dict[str, dict] | None = None) -> None:
    """Both sides (and ``more`` rows) as a Markdown table on stdout, and with the arguments as JSON in ``--out``;
    without ``ours`` (``--transformers-only``), transformers' rows alone."""
    rows = {**({"bert_exp": ours} if ours else {}), "transformers": theirs, **(more or {})}
    print("| | " + " | ".join(keys) + " |")
    for name, scores in rows.items():
        print(f"| {name} | " + " | ".join(f"{scores[k]:.2f}" for k in keys) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), **rows}, indent=1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--doc-stride", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="bf16-mixed")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--run-dir", default="outputs/squad_v2_side_by_side", help="our run's directory")
    parser.add_argument("--out")
    parser.add_argument("--ours-run", help="score this finished run of ours (made with these settings) instead "
                        "of starting one")
    parser.add_argument("--speed-steps", type=int, help="measure speed alone: N training steps a side")
    parser.add_argument("--transformers-only", action="store_true",
                        help="train and score the transformers side alone (ours compared from its own run record)")
    args = parser.parse_args(argv)
    if args.transformers_only and (args.ours_run or args.speed_steps):
        parser.error("--transformers-only scores no run of ours: leave out --ours-run and --speed-steps")
    train, evaluator = windows(args.max_length, args.doc_stride)
    if args.speed_steps:
        ours = speed_ours(args, Path(args.run_dir).resolve() / f"speed{args.speed_steps}_seed{args.seed}_{time.strftime('%Y%m%d_%H%M%S')}")
        report(args, ours, speed_transformers(args, train),
               ("train_tokens_per_sec", "train_seconds", "train_tokens", "peak_rss_gib"))
        return 0
    ours = (None if args.transformers_only else score_run(Path(args.ours_run), evaluator) if args.ours_run
            else run_ours(args, Path(args.run_dir).resolve() / f"seed{args.seed}", evaluator))
    print(f"transformers: {len(train)} training windows, {len(evaluator.features)} evaluation windows", flush=True)
    theirs, theirs_bert_postprocessing = train_transformers(args, train, evaluator)
    report(args, ours, theirs, ("f1", "exact", "HasAns_f1", "HasAns_exact", "NoAns_f1", "NoAns_exact", "null_threshold",
                                "threshold_f1", "best_f1", "best_f1_thresh", "train_tokens_per_sec", "peak_rss_gib"),
           {"transformers, bert_exp's post-processing": theirs_bert_postprocessing})
    return 0


if __name__ == "__main__":
    sys.exit(main())
