"""`python -m bert_exp.predict`: the command's name; the tool is bert_exp.tools.predict."""

import sys

from .tools.predict import main

if __name__ == "__main__":
    sys.exit(main())
