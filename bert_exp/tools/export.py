"""``python -m bert_exp.export RUN_OR_CKPT OUT_DIR``: write a checkpoint as a HuggingFace directory.

RUN_OR_CKPT is a run directory, a Lightning ``.ckpt`` of ours, or a HuggingFace BERT, ALBERT or ELECTRA
directory (which is imported and written back out, so a round trip can be checked). The architecture
follows the checkpoint's task (BertForPreTraining, BertForSequenceClassification,
BertForQuestionAnswering, ...) and model: ALBERT's with ``model.embedding_size`` or
``model.share_layers`` (AlbertForPreTraining ...), and an ELECTRA run's as ElectraForPreTraining, its
generator as ElectraForMaskedLM in OUT_DIR/generator.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UserError
from ..model.hf import save_hf_directory
from ..tasks.checkpoints import load_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="run directory, .ckpt file, or HuggingFace BERT, ALBERT or ELECTRA directory")
    parser.add_argument("out_dir", help="new directory to write (must not exist or be empty)")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.source)
        out = save_hf_directory(ckpt, args.out_dir)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    generator = " (generator: ElectraForMaskedLM in generator/)" if (out / "generator").is_dir() else ""
    print(f"exported {ckpt.source} as {architecture} to {out}{generator}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
