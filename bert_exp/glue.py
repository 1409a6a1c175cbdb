"""`python -m bert_exp.glue`: the command's name; the tool is bert_exp.tools.glue."""

import sys

from .tools.glue import main

if __name__ == "__main__":
    sys.exit(main())
