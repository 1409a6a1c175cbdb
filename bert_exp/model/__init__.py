"""Pure-PyTorch BERT (no Lightning, no Hydra) with HuggingFace BERT's parameter names."""

from .config import BertConfig
from .modeling import BertForPreTraining, BertModel, gather_positions, num_parameters

__all__ = ["BertConfig", "BertModel", "BertForPreTraining", "gather_positions", "num_parameters"]
