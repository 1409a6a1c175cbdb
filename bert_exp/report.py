"""`python -m bert_exp.report`: the command's name; the tool is bert_exp.tools.report."""

import sys

from .tools.report import main

if __name__ == "__main__":
    sys.exit(main())
