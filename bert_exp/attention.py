"""`python -m bert_exp.attention`: the command's name; the tool is bert_exp.tools.attention."""

import sys

from .tools.attention import main

if __name__ == "__main__":
    sys.exit(main())
