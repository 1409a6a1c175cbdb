"""`python -m bert_exp.tokenize`: the command's name; the tool is bert_exp.tools.tokenize."""

import sys

from .tools.tokenize import main

if __name__ == "__main__":
    sys.exit(main())
