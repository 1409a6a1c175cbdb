"""`python -m bert_exp.export`: the command's name; the tool is bert_exp.tools.export."""

import sys

from .tools.export import main

if __name__ == "__main__":
    sys.exit(main())
