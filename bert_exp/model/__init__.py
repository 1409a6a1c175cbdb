"""Pure-PyTorch BERT (no Lightning, no Hydra) with HuggingFace BERT's parameter names."""

from .config import BertConfig
from .modeling import (
    BertForMaskedLM, BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification, BertModel, ElectraForPreTraining, gather_positions,
    num_parameters, parameter_counts,
)

__all__ = ["BertConfig", "BertModel", "BertForPreTraining", "BertForMaskedLM", "ElectraForPreTraining", "BertForSequenceClassification",
           "BertForQuestionAnswering", "BertForTokenClassification", "gather_positions", "num_parameters",
           "parameter_counts"]
