"""Speed benchmarks against transformers: `python -m bert_exp.bench`."""
