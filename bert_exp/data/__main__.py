"""`python -m bert_exp.data`: the former name of `python -m bert_exp.datasets`, kept working."""

import sys

from ..datasets.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
