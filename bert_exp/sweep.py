"""`python -m bert_exp.sweep`: the command's name; the tool is bert_exp.tools.sweep."""

import sys

from .tools.sweep import main

if __name__ == "__main__":
    sys.exit(main())
