"""The catalog of public data sets and their verified downloader (python -m bert_exp.datasets)."""
