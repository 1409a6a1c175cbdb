"""Pure-PyTorch BERT (no Lightning, no Hydra) with HuggingFace BERT's parameter names."""

from .config import BertConfig
from .modeling import (
    BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification, BertModel, gather_positions,
    num_parameters,
)

__all__ = ["BertConfig", "BertModel", "BertForPreTraining", "BertForSequenceClassification",
           "BertForQuestionAnswering", "BertForTokenClassification", "gather_positions", "num_parameters"]
