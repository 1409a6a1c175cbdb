"""`python -m bert_exp.score`: the command's name; the tool is bert_exp.tools.score."""

import sys

from .tools.score import main

if __name__ == "__main__":
    sys.exit(main())
