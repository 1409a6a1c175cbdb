"""`python -m bert_exp.bench`: the command's name; the tool is bert_exp.tools.bench."""

import sys

from ..tools.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
