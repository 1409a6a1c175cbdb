"""Pure-PyTorch BERT (no Lightning, no Hydra) with HuggingFace BERT's parameter names."""

from .config import BertConfig
from .modeling import (
    BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification, BertModel, gather_positions,
    num_parameters,
)

__all__ = ["BertConfig", "BertModel", "BertForPreTraining", "BertForSequenceClassification",
           "BertForQuestionAnswering", "gather_positions", "num_parameters"]
