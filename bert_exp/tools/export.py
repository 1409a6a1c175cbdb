"""``python -m bert_exp.export RUN_OR_CKPT OUT_DIR``: write a checkpoint as a HuggingFace directory.

RUN_OR_CKPT is a run directory, a Lightning ``.ckpt`` of ours, or a HuggingFace BERT directory (which
is imported and written back out, so a round trip can be checked). The architecture follows the
checkpoint's task: BertForPreTraining, BertForSequenceClassification or BertForQuestionAnswering.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from ..model.hf import HEADS, save_hf_directory
from ..tasks.checkpoints import load_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bert_exp.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="run directory, .ckpt file, or HuggingFace BERT directory")
    parser.add_argument("out_dir", help="new directory to write (must not exist or be empty)")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.source)
        out = save_hf_directory(ckpt, args.out_dir)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"exported {ckpt.source} as {HEADS[ckpt.head]} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
