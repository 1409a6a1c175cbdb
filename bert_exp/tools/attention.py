"""``python -m bert_exp.attention SOURCE "text" ["second text"]``: where the model's heads look.

SOURCE is a run directory, a ``.ckpt``, or a model directory (any head: only the encoder runs). The
attention probabilities come from the model itself (``BertModel(..., output_attentions=True)``, the
explicit softmax(QK^T/sqrt(d) + mask)). Written to ``--out`` (default ``attention/``):

* ``layer_<L>.png``: every head of layer L as a heatmap (query rows, key columns);
* ``layer_<L>_head_<H>.png``: one head at full size with the tokens as labels (``--layer``/``--head``);
* ``attention.json``: the tokens, the probabilities of the chosen head, and the statistics: the average
  attention each token receives, each head's entropy (nats, averaged over queries), and each head's
  share of attention on [CLS], on [SEP], on the token itself, on the previous and on the next token
  (the statistics of Clark et al. 2019, "What Does BERT Look At?").

Layers and heads are numbered from 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

from ..data.tokenizer import checkpoint_tokenizer
from ..errors import UserError
from ..model import BertModel

SHARES = ("cls", "sep", "self", "previous", "next")


def attention_statistics(attentions: np.ndarray, tokens: list[str]) -> dict:
    """``attentions`` [layers, heads, query, key], rows summing to 1; ``tokens`` the n tokens.

    received: [key] mean over layers, heads and queries of the attention each token gets;
    received_by_layer: [layer, key]; entropy: [layer, head], mean over queries of -sum p log p;
    cls, sep, self, previous, next: [layer, head], mean over queries of the probability on those keys
    (previous/next: over the queries that have one)."""
    a = np.asarray(attentions, dtype=np.float64)
    if a.ndim != 4 or a.shape[2] != a.shape[3] or a.shape[3] != len(tokens):
        raise ValueError(f"attentions {a.shape} do not fit {len(tokens)} tokens")
    n = len(tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0)), 0.0)
    entropy = -plogp.sum(-1).mean(-1)
    cls = np.array([t == "[CLS]" for t in tokens])
    sep = np.array([t == "[SEP]" for t in tokens])
    index = np.arange(n)
    stats = {
        "received": a.mean(axis=(0, 1, 2)).tolist(),
        "received_by_layer": a.mean(axis=(1, 2)).tolist(),
        "entropy": entropy.tolist(),
        "cls": a[..., cls].sum(-1).mean(-1).tolist(),
        "sep": a[..., sep].sum(-1).mean(-1).tolist(),
        "self": a[..., index, index].mean(-1).tolist(),
        "previous": (a[..., index[1:], index[1:] - 1].mean(-1) if n > 1 else np.zeros(a.shape[:2])).tolist(),
        "next": (a[..., index[:-1], index[:-1] + 1].mean(-1) if n > 1 else np.zeros(a.shape[:2])).tolist(),
    }
    stats["max_entropy"] = math.log(n)
    return stats


def load_encoder(source: str | Path):
    """The encoder of any checkpoint (its head is not needed to see where it attends), and its tokenizer."""
    from ..tasks.checkpoints import load_checkpoint
    from .predict import _model_source

    ckpt = load_checkpoint(_model_source(source))
    if not ckpt.vocab:
        raise UserError(f"{ckpt.source} carries no vocabulary (vocab.txt or tokenizer.json)")
    model = BertModel(ckpt.config, add_pooling_layer=False)
    state = {k.removeprefix("bert."): v for k, v in ckpt.state_dict.items() if k.startswith("bert.")}
    missing, _ = model.load_state_dict({k: v for k, v in state.items() if not k.startswith("pooler.")}, strict=False)
    if missing:
        raise UserError(f"{ckpt.source} lacks encoder weights: {missing[:5]}")
    return model.eval(), checkpoint_tokenizer(ckpt.vocab, ckpt.lowercase, ckpt.tokenizer, source=ckpt.source), ckpt


def attentions_for(model: BertModel, tokenizer, text: str, pair: str | None = None,
                   max_length: int | None = None) -> tuple[np.ndarray, list[str], int]:
    """[layers, heads, n, n] probabilities and the tokens; the third value: tokens cut to fit."""
    tokenizer.no_truncation()
    enc = tokenizer.encode(text, pair) if pair is not None else tokenizer.encode(text)
    limit = min(max_length or model.config.max_position_embeddings, model.config.max_position_embeddings)
    cut = 0
    if len(enc.ids) > limit:
        cut = len(enc.ids) - limit
        tokenizer.enable_truncation(limit, strategy="longest_first")
        try:
            enc = tokenizer.encode(text, pair) if pair is not None else tokenizer.encode(text)
        finally:
            tokenizer.no_truncation()
    ids = torch.tensor([enc.ids])
    with torch.inference_mode():
        attentions = model(ids, torch.tensor([enc.type_ids]), torch.ones_like(ids), output_attentions=True)[-1]
    return torch.stack([a[0] for a in attentions]).float().numpy(), enc.tokens, cut


def plot_layer(probs: np.ndarray, layer: int, path: Path) -> Path:
    """All heads of one layer ([heads, n, n]) in a grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = probs.shape[0]
    cols = math.ceil(math.sqrt(heads))
    rows = math.ceil(heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols, 2.4 * rows), squeeze=False)
    for h, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if h < heads:
            ax.imshow(probs[h], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"head {h + 1}", fontsize=8)
        else:
            ax.axis("off")
    fig.suptitle(f"layer {layer}: attention (rows: queries, columns: keys)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_head(probs: np.ndarray, tokens: list[str], layer: int, head: int, path: Path) -> Path:
    """One head ([n, n]) at full size, the tokens as labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(tokens)
    size = max(4.0, 0.28 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(probs, cmap="viridis", vmin=0, vmax=max(float(probs.max()), 1e-6))
    ax.set_xticks(range(n), tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(n), tokens, fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    ax.set_title(f"layer {layer}, head {head}")
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summary_table(stats: dict, console) -> None:
    from rich.table import Table

    table = Table(title="per layer, mean over heads", title_justify="left")
    for name in ("layer", "entropy", *SHARES):
        table.add_column(name, justify="right")
    for layer in range(len(stats["entropy"])):
        table.add_row(str(layer + 1), f"{np.mean(stats['entropy'][layer]):.2f}",
                      *(f"{np.mean(stats[s][layer]):.2f}" for s in SHARES))
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bert_exp.attention", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="run directory, .ckpt or model directory")
    p.add_argument("text")
    p.add_argument("pair", nargs="?", help="a second text (segment B)")
    p.add_argument("--layer", type=int, help="the layer drawn (grid) and whose head is drawn full size (default: last)")
    p.add_argument("--head", type=int, default=1, help="the head drawn full size (default: 1)")
    p.add_argument("--out", default="attention", help="directory for the PNGs and attention.json")
    p.add_argument("--all-layers", action="store_true", help="with --layer: still draw every layer's grid")
    p.add_argument("--max-length", type=int)
    args = p.parse_args(argv)
    try:
        model, tokenizer, ckpt = load_encoder(args.source)
        layers, heads = ckpt.config.num_hidden_layers, ckpt.config.num_attention_heads
        layer = args.layer or layers
        if not 1 <= layer <= layers:
            raise UserError(f"--layer {layer}: the model has layers 1..{layers}")
        if not 1 <= args.head <= heads:
            raise UserError(f"--head {args.head}: the model has heads 1..{heads}")
        if not args.text.strip():
            raise UserError("the text is empty")
        attentions, tokens, cut = attentions_for(model, tokenizer, args.text, args.pair, args.max_length)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if cut:
        print(f"warning: the text was cut by {cut} tokens to the model's {len(tokens)}", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stats = attention_statistics(attentions, tokens)
    drawn = [layer] if args.layer and not args.all_layers else range(1, layers + 1)
    files = [plot_layer(attentions[i - 1], i, out / f"layer_{i}.png") for i in drawn]
    files.append(plot_head(attentions[layer - 1, args.head - 1], tokens, layer, args.head,
                           out / f"layer_{layer}_head_{args.head}.png"))
    record = {"source": ckpt.source, "text": args.text, "pair": args.pair, "tokens": tokens, "layers": layers,
              "heads": heads, "layer": layer, "head": args.head,
              "attention": attentions[layer - 1, args.head - 1].tolist(), **stats}
    (out / "attention.json").write_text(json.dumps(record) + "\n")
    from rich.console import Console

    console = Console()
    received = sorted(zip(stats["received"], tokens), reverse=True)[:5]
    console.print("most attended: " + ", ".join(f"{t} {v:.2f}" for v, t in received))
    summary_table(stats, console)
    console.print(f"wrote {len(files)} PNGs and attention.json to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
