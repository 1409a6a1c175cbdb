"""Which of the encoder's hidden states a task head reads: the feature-based approach of the BERT paper
(§5.3, after ELMo), where the encoder is frozen and a head learns from a combination of its layers.

Every combination comes from the one forward pass (``BertModel(..., output_hidden_states=True)``):

* ``last``: the last layer (what fine-tuning and HuggingFace's heads read; a classifier reads the pooler);
* ``second_to_last``: the layer below it;
* ``sum_last_4`` / ``concat_last_4``: the last four layers summed, or side by side (4 x hidden wide);
* ``all``: ELMo's scalar mix, a learned softmax-weighted sum of the embeddings and every layer, times a
  learned scale (``mix_weights``, ``mix_scale``).
"""

from __future__ import annotations

import torch
from torch import nn

LAYER_CHOICES = ("last", "second_to_last", "sum_last_4", "concat_last_4", "all")
# how a sentence classifier reduces the tokens to one vector: BERT's [CLS] (through the pooler when it
# reads the last layer), or the mean over the real tokens (Sentence-BERT's choice)
POOLING_CHOICES = ("cls", "mean")


def sentence_token(sequence: torch.Tensor, attention_mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """The position that stands for the whole input: [CLS] (the first), or on a causal model the last
    non-padding token, the only one that has read everything. [batch, seq, width] -> [batch, width]."""
    if not causal:
        return sequence[:, 0]
    batch, length = sequence.shape[:2]
    last = ((attention_mask.long().sum(dim=1) - 1).clamp(min=0) if attention_mask is not None
            else torch.full((batch,), length - 1, device=sequence.device))
    return sequence[torch.arange(batch, device=sequence.device), last]


def mean_of_tokens(sequence: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean over the non-padding positions. [batch, seq, width] -> [batch, width]."""
    if attention_mask is None:
        return sequence.mean(dim=1)
    mask = attention_mask.to(torch.float32)[..., None]  # float32: bf16 counts exactly only up to 256
    return ((sequence.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).to(sequence.dtype)


class LayerFeatures:
    """A mixin for models with an encoder under ``bert``: ``encode`` gives the features ``layers`` chooses
    (and the pooled output where the encoder has a pooler)."""

    layers: str = "last"
    bert: nn.Module

    def _init_layer_features(self, config, layers: str) -> None:
        if layers not in LAYER_CHOICES:
            raise ValueError(f"layers: {layers!r} is not one of {LAYER_CHOICES}")
        self.layers = layers
        if layers == "all":
            self.mix_weights = nn.Parameter(torch.zeros(config.num_hidden_layers + 1))
            self.mix_scale = nn.Parameter(torch.ones(()))

    @property
    def feature_width(self) -> int:
        return self.config.hidden_size * (4 if self.layers == "concat_last_4" else 1)

    def encode(self, input_ids, token_type_ids=None, attention_mask=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(features [batch, seq, feature_width], pooled output or None)."""
        if self.layers == "last":
            return self.bert(input_ids, token_type_ids, attention_mask)[:2]
        _, pooled, hidden = self.bert(input_ids, token_type_ids, attention_mask, output_hidden_states=True)
        if self.layers == "second_to_last":
            return hidden[-2], pooled
        if self.layers == "sum_last_4":
            return torch.stack(hidden[-4:]).sum(0), pooled
        if self.layers == "concat_last_4":
            return torch.cat(hidden[-4:], dim=-1), pooled
        weights = torch.softmax(self.mix_weights, dim=0).to(hidden[0].dtype)
        return self.mix_scale * torch.einsum("l,lbsh->bsh", weights, torch.stack(hidden)), pooled

    def unreached_prefixes(self) -> tuple[str, ...]:
        """Parameters the head's features never depend on: above the second-to-last layer (the last layer
        and, with pre-LN, the final LayerNorm), and the pooler where the head does not read it. Frozen by
        the task, so that DDP does not wait for their gradients."""
        prefixes = []
        if self.layers != "last" or not self.reads_pooler:
            prefixes.append("bert.pooler.")
        if self.layers == "second_to_last":
            prefixes.append("bert.encoder.LayerNorm.")
            if not self.config.share_layers:
                prefixes.append(f"bert.encoder.layer.{self.config.num_hidden_layers - 1}.")
        return tuple(prefixes)

    reads_pooler = False
