"""bert_exp: BERT pre-training and fine-tuning as reproducible, composable experiments."""

__version__ = "0.1.0"
