"""`python -m bert_exp.info`: the command's name; the tool is bert_exp.tools.info."""

import sys

from .tools.info import main

if __name__ == "__main__":
    sys.exit(main())
