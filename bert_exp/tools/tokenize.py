"""``python -m bert_exp.tokenize SOURCE "text" ["second text"]``: what the model is fed, as a table.

SOURCE is a ``vocab.txt`` or ``tokenizer.json``, a run directory, a ``.ckpt`` or a model directory. Each row is one position:
the WordPiece token, its id, token_type_id (segment A/B of a pair), attention_mask and the characters it
came from. ``--max-length`` shows what truncation cuts (``--pad`` pads up to it); with a pair and
``--doc-stride`` the pair is a SQuAD question and context, cut into the windows training and prediction use.
``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer

from ..data.tasks import SquadExample, make_features
from ..data.tokenizer import checkpoint_tokenizer, load_vocab_file
from ..errors import UserError


def load_tokenizer(source: str | Path, lowercase: bool | None = None) -> tuple[Tokenizer, int | None]:
    """The tokenizer of a vocab.txt, a tokenizer.json or a model (and the model's positions, when known).
    ``lowercase`` applies to WordPiece vocabularies; a saved tokenizer.json keeps its own normaliser."""
    path = Path(source).expanduser()
    if path.is_file() and path.suffix in (".txt", ".json"):
        return load_vocab_file(path, True if lowercase is None else lowercase), None
    if path.is_dir() and not (path / "config.json").is_file() and not (path / "checkpoints").is_dir():
        for name in ("vocab.txt", "tokenizer.json"):  # a vocabulary directory (a cache's)
            if (path / name).is_file():
                return load_vocab_file(path / name, True if lowercase is None else lowercase), None
    from ..tasks.checkpoints import load_checkpoint

    ckpt = load_checkpoint(path)
    if not ckpt.vocab:
        raise UserError(f"{ckpt.source} carries no vocabulary (vocab.txt or tokenizer.json)")
    tokenizer = checkpoint_tokenizer(ckpt.vocab, ckpt.lowercase if lowercase is None else lowercase, ckpt.tokenizer,
                                     source=ckpt.source)
    return tokenizer, ckpt.config.max_position_embeddings


def encode(tokenizer: Tokenizer, text: str, pair: str | None = None, max_length: int | None = None,
           pad: bool = False) -> dict:
    """tokens, ids, token_type_ids, attention_mask, offsets (and, when cut, how many tokens were)."""
    tokenizer.no_truncation()
    tokenizer.no_padding()
    whole = tokenizer.encode(text, pair) if pair is not None else tokenizer.encode(text)
    enc = whole
    if max_length:
        tokenizer.enable_truncation(max_length, strategy="longest_first")
        if pad:
            tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), length=max_length)
        try:
            enc = tokenizer.encode(text, pair) if pair is not None else tokenizer.encode(text)
        finally:
            tokenizer.no_truncation()
            tokenizer.no_padding()
    out = {"tokens": enc.tokens, "ids": enc.ids, "token_type_ids": enc.type_ids,
           "attention_mask": enc.attention_mask, "offsets": [list(o) for o in enc.offsets],
           "sequence_ids": enc.sequence_ids}
    if len(whole.ids) > sum(enc.attention_mask):
        out["truncated"] = len(whole.ids) - sum(enc.attention_mask)
    return out


def squad_windows(tokenizer: Tokenizer, question: str, context: str, max_length: int, doc_stride: int,
                  max_query_length: int = 64) -> list[dict]:
    """The windows of data/tasks/squad.py's make_features: [CLS] question [SEP] window [SEP] each."""
    features = make_features([SquadExample("0", question, context, [])], tokenizer, max_length, doc_stride,
                             max_query_length, labels=False)
    vocab = {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}
    return [{"tokens": [vocab[i] for i in f.input_ids], "ids": f.input_ids, "token_type_ids": f.token_type_ids,
             "attention_mask": [1] * len(f.input_ids), "offsets": [list(o) if o else None for o in f.offsets],
             "max_context": f.max_context} for f in features]


def render(table: dict, texts: list[str], title: str, console) -> None:
    from rich.table import Table

    pair = len(texts) > 1
    t = Table(title=title, title_justify="left")
    for name in ("pos", "token", "id", "type", "mask", "chars"):
        t.add_column(name, justify="right" if name in ("pos", "id", "type", "mask") else "left")
    if "max_context" in table:
        t.add_column("max ctx")
    seq_ids = table.get("sequence_ids") or [None if o is None else 1 for o in table["offsets"]]
    for i, (token, token_id, ty, mask) in enumerate(zip(table["tokens"], table["ids"], table["token_type_ids"],
                                                        table["attention_mask"])):
        offset, seq = table["offsets"][i], seq_ids[i] if i < len(seq_ids) else None
        chars = "" if offset is None or seq is None else f"{offset[0]}:{offset[1]} {texts[seq][offset[0]:offset[1]]!r}"
        style = "dim" if mask == 0 else ("cyan" if pair and ty == 0 and seq is not None else
                                          "magenta" if pair and ty == 1 and seq is not None else None)
        segment = ("A" if ty == 0 else "B") if pair else str(ty)
        row = [str(i), token, str(token_id), f"{ty} {segment}" if pair else segment, str(mask), chars]
        if "max_context" in table:
            row.append("yes" if table["max_context"][i] else "")
        t.add_row(*row, style=style)
    console.print(t)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bert_exp.tokenize", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="vocab.txt, run directory, .ckpt or model directory")
    p.add_argument("text")
    p.add_argument("pair", nargs="?", help="a second text: segment B (SQuAD: the context)")
    p.add_argument("--max-length", type=int, help="cut (longest first) to this many tokens")
    p.add_argument("--pad", action="store_true", help="pad to --max-length (attention_mask 0 there)")
    p.add_argument("--doc-stride", type=int, help="with a pair: SQuAD windows, starts this many tokens apart")
    p.add_argument("--max-query-length", type=int, default=64)
    case = p.add_mutually_exclusive_group()
    case.add_argument("--cased", dest="lowercase", action="store_false", default=None, help="do not lowercase")
    case.add_argument("--uncased", dest="lowercase", action="store_true", help="lowercase (a vocab.txt's default)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    try:
        tokenizer, positions = load_tokenizer(args.source, args.lowercase)
        texts = [args.text] + ([args.pair] if args.pair is not None else [])
        if not all(t.strip() for t in texts):
            raise UserError("the text is empty")
        if args.doc_stride is not None:
            if args.pair is None:
                raise UserError("--doc-stride cuts a question and context into windows: give both texts")
            if args.doc_stride < 1:
                raise UserError(f"--doc-stride {args.doc_stride}: at least 1")
            length = args.max_length or min(384, positions or 384)
            query = min(len(tokenizer.encode(args.text, add_special_tokens=False).ids), args.max_query_length)
            if length - query - 3 < 1:
                raise UserError(f"--max-length {length} leaves no room for the context")
            tables = squad_windows(tokenizer, args.text, args.pair, length, args.doc_stride, args.max_query_length)
            titles = [f"window {i + 1} of {len(tables)}" for i in range(len(tables))]
        else:
            if args.pad and not args.max_length:
                raise UserError("--pad pads up to --max-length: give it")
            if args.max_length and args.max_length < (5 if args.pair is not None else 3):
                raise UserError(f"--max-length {args.max_length} leaves no room for the text beside [CLS]/[SEP]")
            tables = [encode(tokenizer, args.text, args.pair, args.max_length, args.pad)]
            titles = [f"{len(tables[0]['ids'])} tokens" + (f", {tables[0]['truncated']} cut by --max-length "
                                                           f"{args.max_length}" if "truncated" in tables[0] else "")]
        if positions and not args.max_length and len(tables[0]["ids"]) > positions:
            print(f"warning: {len(tables[0]['ids'])} tokens, the model takes {positions}", file=sys.stderr)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(tables if args.doc_stride is not None else tables[0], ensure_ascii=False))
        return 0
    from rich.console import Console

    console = Console()
    for table, title in zip(tables, titles):
        render(table, texts, title, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
