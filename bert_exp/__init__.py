"""bert_exp: BERT pre-training and fine-tuning as reproducible, composable experiments."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``from bert_exp import Predictor`` without importing torch for a plain ``import bert_exp``."""
    if name == "Predictor":
        from .tools.predict import Predictor

        return Predictor
    raise AttributeError(f"module 'bert_exp' has no attribute {name!r}")


__all__ = ["Predictor", "__version__"]
