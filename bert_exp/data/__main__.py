"""`python -m bert_exp.data`: the data command (list, download), as its help and messages name it; the code
is bert_exp.datasets's, which `python -m bert_exp.datasets` runs too."""

import sys

from ..datasets.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
