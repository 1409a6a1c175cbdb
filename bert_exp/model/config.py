"""BertConfig: the architecture hyper-parameters, with HuggingFace BERT's field names.

Each field says once what it is (``option``): part of the architecture unless ``runtime`` (how a model is
trained or initialised: a checkpoint fits a model that differs in it), and in HuggingFace's BertConfig
unless ``ours``. Checkpoint compatibility, export and its refusals derive from these facts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


def option(default, *, runtime: bool = False, ours: bool = False, kept_from_checkpoint: bool = False):
    """A config field: ``runtime`` (not architecture: dropout, initialisation); ``ours`` (a field
    HuggingFace's BertConfig lacks; its default is BERT's behaviour, so another value is not BERT);
    ``kept_from_checkpoint`` (architecture that a model started from a checkpoint takes from it rather
    than being refused over)."""
    return dataclasses.field(default=default, metadata={"runtime": runtime, "ours": ours,
                                                         "kept_from_checkpoint": kept_from_checkpoint})


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    # "gelu" is the exact erf form used by HuggingFace BERT checkpoints; the original TF code used
    # the tanh approximation, available as "gelu_tanh".
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = option(0.1, runtime=True)
    attention_probs_dropout_prob: float = option(0.1, runtime=True)
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = option(0.02, runtime=True)
    # weights drawn from normal(0, initializer_range) ("normal", HuggingFace's), or from it truncated
    # at 2 initializer_range ("truncated_normal", BERT's original; std 0.88 initializer_range).
    initializer: str = option("normal", runtime=True, ours=True)
    layer_norm_eps: float = 1e-12
    # the embedding row that padding reads (no gradient flows to it): the tokenizer's [PAD] id, which
    # model=from_checkpoint takes from the vocabulary; how the weights train, not what they are
    pad_token_id: int = option(0, runtime=True)
    # ALBERT's factorised embedding: embeddings of this size, projected to hidden_size
    # (``encoder.embedding_hidden_mapping_in``); None: embeddings are hidden_size wide (BERT)
    embedding_size: int | None = option(None, ours=True)
    # ALBERT's cross-layer sharing: one layer's weights used for all num_hidden_layers layers
    share_layers: bool = option(False, ours=True)
    # a left-to-right model: each position attends to itself and the positions before it (objective=clm);
    # the pooled output is then the last token's, the only one that has seen the whole input
    causal: bool = option(False, ours=True, kept_from_checkpoint=True)
    # "post": BERT's LayerNorm after each residual sum; "pre": LayerNorm on each sub-layer's input and one
    # more after the last layer (Xiong et al. 2020, "On Layer Normalization in the Transformer
    # Architecture"), which trains without the long loss plateau a short post-LN run sits on
    layer_norm_position: str = option("post", ours=True)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not a multiple of "
                f"model.num_attention_heads={self.num_attention_heads}"
            )
        if self.hidden_act not in ("gelu", "gelu_tanh"):
            raise ValueError(f"model.hidden_act={self.hidden_act!r}: expected 'gelu' or 'gelu_tanh'")
        if self.initializer not in ("normal", "truncated_normal"):
            raise ValueError(f"model.initializer={self.initializer!r}: expected 'normal' or 'truncated_normal'")
        if self.layer_norm_position not in ("post", "pre"):
            raise ValueError(f"model.layer_norm_position={self.layer_norm_position!r}: expected 'post' or 'pre'")
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(f"model.embedding_size={self.embedding_size}: must be positive (or null)")

    @property
    def embedding_width(self) -> int:
        """The width of the embeddings (and of the MLM head's output transform)."""
        return self.embedding_size or self.hidden_size

    def mismatches(self, checkpoint: "BertConfig") -> list[str]:
        """The architecture fields in which a checkpoint's config differs from this one, which the model
        started from it cannot take (every field but the runtime ones and those kept from the checkpoint)."""
        return [f.name for f in dataclasses.fields(self)
                if not (f.metadata.get("runtime") or f.metadata.get("kept_from_checkpoint"))
                and getattr(self, f.name) != getattr(checkpoint, f.name)]

    def non_bert_options(self) -> dict:
        """The options in use that a HuggingFace BERT cannot express (empty for a plain BERT): the
        architecture fields of ours alone set away from their default."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.metadata.get("ours") and not f.metadata.get("runtime") and getattr(self, f.name) != f.default}

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def hf_dict(self) -> dict:
        """The fields a HuggingFace BertConfig has (ours alone left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.metadata.get("ours")}

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        """Build from a dict that may hold extra keys (a HuggingFace config.json does)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})
