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


# model.unpad=auto unpads a batch whose share of padding is at least this
UNPAD_AUTO_PADDING = 0.1
# the string fields' values
CHOICES = {
    "hidden_act": ("gelu", "gelu_tanh", "silu", "relu"),
    "initializer": ("normal", "truncated_normal"),
    "layer_norm_position": ("post", "pre"),
    "feed_forward": ("mlp", "glu"),
    "position_embedding_type": ("absolute", "sinusoidal", "rotary", "alibi"),
    "classifier_head": ("pooler", "transform"),
}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    # "gelu" is the exact erf form used by HuggingFace BERT checkpoints; the original TF code used
    # the tanh approximation, available as "gelu_tanh"; "silu" (in a GLU: SwiGLU) and "relu" besides.
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

    # The options of the encoders after BERT (docs/model-options.md lists each with its paper). Each
    # default is BERT's behaviour, so a config that sets none of them is exactly BERT.
    # the feed-forward: "mlp" (BERT: dense, activation, dense) or "glu" (Shazeer 2020: the first dense layer
    # twice intermediate_size wide, activation(first half) * second half; GeGLU with gelu, SwiGLU with silu)
    feed_forward: str = option("mlp", ours=True)
    # biases of the dense layers (Q/K/V, attention output, feed-forward, pooler and head transforms), and
    # of the norms; the task classifiers keep theirs
    dense_bias: bool = option(True, ours=True)
    norm_bias: bool = option(True, ours=True)
    # the masked-LM decoder's bias (the decoder weight is the word embeddings either way)
    decoder_bias: bool = option(True, ours=True)
    # the masked-LM head's transform (dense, activation, norm) before the decoder; cramming has none
    mlm_head_transform: bool = option(True, ours=True)
    # positions: "absolute" (BERT's learned table), "sinusoidal" (fixed sinusoids times one learned scale,
    # cramming's scaled-sinusoidal), "rotary" (RoFormer: queries and keys rotated, no table) or "alibi"
    # (Press et al. 2022, a distance penalty per head on the attention scores, symmetric as MosaicBERT's)
    position_embedding_type: str = option("absolute", ours=True)
    # rotary: the base of the rotation frequencies, and the local-attention layers' own (null: the same)
    rotary_base: float = option(10000.0, ours=True)
    rotary_local_base: float | None = option(None, ours=True)
    # local attention: a token attends to those within local_attention // 2 positions (ModernBERT's
    # window width); null: every layer global. With it, layer i is global when i % global_attention_every == 0
    local_attention: int | None = option(None, ours=True)
    global_attention_every: int = option(1, ours=True)
    # the token-type (segment) embeddings; ModernBERT has none
    token_type_embeddings: bool = option(True, ours=True)
    # the norm on the embeddings; and, with pre-LN, whether the first layer normalises its attention input
    # (ModernBERT does not: its embeddings leave normalised)
    embedding_norm: bool = option(True, ours=True)
    first_attention_norm: bool = option(True, ours=True)
    # a norm after the last layer; null: where layer_norm_position=pre puts one
    final_norm: bool | None = option(None, ours=True)
    # the embedding and decoder rows rounded up to a multiple of this (MosaicBERT: 64, for the matrix
    # units); the rows past vocab_size are never read and their logits are cut off
    pad_vocab_multiple: int = option(1, ours=True)
    # what the task heads put before their classifier: "pooler" (BERT's dense + tanh on the sentence token;
    # token and span heads read the features directly) or "transform" (ModernBERT's dense, activation and
    # norm, on the pooled token or on every token)
    classifier_head: str = option("pooler", ours=True)
    # how the encoder computes, not what: true runs the layers on the batch's real tokens laid end to end
    # (attention padded back per sequence), "auto" where a batch is at least UNPAD_AUTO_PADDING padding;
    # the same outputs at every real position either way (docs/speed.md#real-tokens-only)
    unpad: bool | str = option(False, runtime=True, ours=True)
    # how, not what: true keeps only each layer's input in training and computes the layer again in
    # backward: less memory for a second forward pass, the same gradients (dropout's masks are drawn
    # again from the same random state)
    gradient_checkpointing: bool = option(False, runtime=True, ours=True)

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not a multiple of "
                f"model.num_attention_heads={self.num_attention_heads}"
            )
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"model.{name}={getattr(self, name)!r}: expected one of "
                                 + ", ".join(repr(c) for c in choices))
        for name in ("embedding_size", "local_attention"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"model.{name}={getattr(self, name)}: must be positive (or null)")
        for name in ("global_attention_every", "pad_vocab_multiple"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name}={getattr(self, name)}: must be at least 1")
        if self.position_embedding_type == "rotary" and self.head_dim % 2:
            raise ValueError(f"model.position_embedding_type=rotary rotates pairs of a head's dimensions, but "
                             f"model.hidden_size / model.num_attention_heads = {self.head_dim} is odd")
        if self.unpad not in (True, False, "auto"):
            raise ValueError(f"model.unpad={self.unpad!r}: expected true, false or auto")
        for problem in self._contradictions():
            raise ValueError(problem)

    def _contradictions(self):
        """Combinations that make no sense, each a line naming both settings."""
        post = self.layer_norm_position == "post"
        if self.global_attention_every > 1 and self.local_attention is None:
            yield (f"model.global_attention_every={self.global_attention_every} alternates global and local layers, "
                   "but model.local_attention=null makes every layer global (set the window width)")
        if self.rotary_local_base is not None and (self.position_embedding_type != "rotary" or self.local_attention is None):
            yield (f"model.rotary_local_base={self.rotary_local_base} is the local layers' rotary base, but "
                   f"model.position_embedding_type={self.position_embedding_type} with "
                   f"model.local_attention={self.local_attention} has no rotary local layers")
        if post and self.final_norm:
            yield ("model.final_norm=true after model.layer_norm_position=post: the last layer's output is already "
                   "normalised")
        if not self.first_attention_norm and (post or not self.embedding_norm):
            yield (f"model.first_attention_norm=false with model.layer_norm_position={self.layer_norm_position} and "
                   f"model.embedding_norm={str(self.embedding_norm).lower()}: only a pre-LN model whose embeddings "
                   "are normalised may leave the first layer's input as it is")
        if not self.mlm_head_transform and self.embedding_size is not None:
            yield (f"model.mlm_head_transform=false with model.embedding_size={self.embedding_size}: the transform "
                   "is what projects the hidden size to the embeddings' width for the tied decoder")

    @property
    def padded_vocab_size(self) -> int:
        """The embedding and decoder rows: vocab_size rounded up to pad_vocab_multiple."""
        return -(-self.vocab_size // self.pad_vocab_multiple) * self.pad_vocab_multiple

    @property
    def has_final_norm(self) -> bool:
        return self.layer_norm_position == "pre" if self.final_norm is None else self.final_norm

    def layer_is_global(self, index: int) -> bool:
        """Whether layer ``index`` (from 0) attends over the whole sequence (else within the local window)."""
        return self.local_attention is None or index % self.global_attention_every == 0

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
        return non_bert_values(self.to_dict())

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


def non_bert_values(values) -> dict:
    """Of a mapping of model fields (a config, a run's ``model`` group), the architecture fields of ours
    alone set away from their default: what makes the model other than BERT."""
    return {f.name: values[f.name] for f in dataclasses.fields(BertConfig)
            if f.metadata.get("ours") and not f.metadata.get("runtime") and f.name in values
            and values[f.name] != f.default}
