"""``python -m bert_exp.export RUN_OR_CKPT OUT_DIR``: write a checkpoint as a HuggingFace directory.

RUN_OR_CKPT is a run directory, a Lightning ``.ckpt`` of ours, or a HuggingFace BERT, ALBERT or ELECTRA
directory (which is imported and written back out, so a round trip can be checked). The architecture
follows the checkpoint's task (BertForPreTraining, BertForSequenceClassification,
BertForQuestionAnswering, ...) and model: ALBERT's with ``model.embedding_size`` or
``model.share_layers`` (AlbertForPreTraining ...), and an ELECTRA run's as ElectraForPreTraining, its
generator as ElectraForMaskedLM in OUT_DIR/generator.

``--dtype bf16`` writes the weights in bfloat16 (half the bytes; fine-tuning and transformers cast them
back to the model's float32 on loading). ``--max-shard-size 15MB`` splits weights larger than that into
shards, as transformers does (model-00001-of-0000N.safetensors and model.safetensors.index.json), for
places that take files of a limited size; bert_exp and transformers load either layout.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from ..data.corpus import parse_bytes
from ..errors import UserError
from ..model.hf import save_hf_directory
from ..tasks.checkpoints import load_checkpoint

DTYPES = {"keep": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def shard_size(text: str) -> int:
    try:
        value = parse_bytes(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size such as 15MB (powers of 1024) or a number of bytes")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="run directory, .ckpt file, or HuggingFace BERT, ALBERT or ELECTRA directory")
    parser.add_argument("out_dir", help="new directory to write (must not exist or be empty)")
    parser.add_argument("--dtype", choices=list(DTYPES), default="keep",
                        help="the floating-point weights' type in the files (keep: the checkpoint's)")
    parser.add_argument("--max-shard-size", type=shard_size, default=None, metavar="SIZE",
                        help="split weights larger than SIZE (15MB, 512KB: powers of 1024) into shards with "
                             "model.safetensors.index.json; a tensor larger than SIZE gets a shard of its own")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.source)
        out = save_hf_directory(ckpt, args.out_dir, dtype=DTYPES[args.dtype], max_shard_bytes=args.max_shard_size)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    generator = " (generator: ElectraForMaskedLM in generator/)" if (out / "generator").is_dir() else ""
    weights = sorted(out.glob("model*.safetensors"))
    sizes = ", ".join(f"{w.name} {w.stat().st_size / 2**20:.1f} MiB" for w in weights)
    print(f"exported {ckpt.source} as {architecture} to {out}{generator} ({sizes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
