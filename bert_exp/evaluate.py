"""`python -m bert_exp.evaluate`: the command's name; the tool is bert_exp.tools.evaluate."""

import sys

from .tools.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
