"""BERT in plain PyTorch.

Module and parameter names follow HuggingFace's ``modeling_bert`` exactly (``bert.encoder.layer.0.
attention.self.query.weight`` ...), so a state dict moves between the two without renaming.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

from .config import UNPAD_AUTO_PADDING, BertConfig
from .dropout import Dropout, dropout
from .features import LAYER_CHOICES, POOLING_CHOICES, LayerFeatures, mean_of_tokens, sentence_token


def _activation(name: str):
    return {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
            "relu": F.relu}[name]


def layer_norm(config: BertConfig, width: int | None = None) -> nn.LayerNorm:
    return nn.LayerNorm(width or config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)


def sinusoids(length: int, width: int) -> torch.Tensor:
    """[length, width]: sin at the even dimensions, cos at the odd ones, wavelengths from 2 pi to 10000 x 2 pi
    (Vaswani et al. 2017, section 3.5)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-torch.log(torch.tensor(10000.0)) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : width // 2]
    return table


class BertEmbeddings(nn.Module):
    """Word embeddings, plus the learned position table (``absolute``) or the scaled sinusoids
    (``sinusoidal``; ``rotary`` and ``alibi`` act in attention instead), plus the token types where
    the model has them; then the norm (``embedding_norm``) and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        # padding_idx as in HuggingFace: the [PAD] row starts at zero and receives no gradient
        width = config.embedding_width  # hidden_size, or ALBERT's embedding_size
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, width, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        elif config.position_embedding_type == "sinusoidal":
            self.register_buffer("sinusoids", sinusoids(config.max_position_embeddings, width), persistent=False)
            self.position_scale = nn.Parameter(torch.tensor(width ** -0.5))  # cramming's initial scale
        if config.token_type_embeddings:
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        if config.embedding_norm:
            self.LayerNorm = layer_norm(config, width)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        if hasattr(self, "token_type_embeddings"):
            x = x + self.token_type_embeddings(torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids)
        if hasattr(self, "position_embeddings"):
            x = x + self.position_embeddings(torch.arange(seq_len, device=input_ids.device))
        elif hasattr(self, "sinusoids"):
            x = x + self.position_scale * self.sinusoids[:seq_len].to(x.dtype)
        if hasattr(self, "LayerNorm"):
            x = self.LayerNorm(x)
        return self.dropout(x)


# model.unpad's attention: rows of similar length share a grid padded to their longest; a grid costs about
# what attending one row of this many tokens squared costs (kernel launches, their own copies), so rows
# are split into grids where that saves more (on a 2-core Xeon, MiniLM fp32, costs of 1024, 4096 and 16384
# were within 4 % of each other on STS-B, MRPC and SQuAD rows; 0 and one grid were 10-30 % slower)
ATTENTION_GRID_COST = 64 * 64


def length_groups(lengths: list[int], cost: int) -> list[int]:
    """Where to cut ``lengths`` (sorted longest first) into groups so that the sum over the groups of
    rows x longest^2 (the attention's work on their grid) plus ``cost`` each is least: the groups' starts."""
    best, cut = [0] + [None] * len(lengths), [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        best[end], cut[end] = min((best[start] + (end - start) * lengths[start] ** 2 + cost, start)
                                  for start in range(end))
    starts, end = [], len(lengths)
    while end:
        starts.append(cut[end])
        end = cut[end]
    return starts[::-1]


@dataclasses.dataclass
class AttentionGrid:
    """Rows of a batch laid out [rows, width] for attention: their real tokens are ``tokens`` of the
    packed order, at ``slots`` of the flattened grid (None where they fill it: no copy then)."""

    rows: torch.Tensor  # the rows' places in the batch
    width: int
    tokens: slice
    slots: torch.Tensor | None

    def lay_out(self, x: torch.Tensor) -> torch.Tensor:
        """[tokens, ...] (all the batch's) -> [rows, width, ...], zeros at the padding."""
        part = x[self.tokens]
        if self.slots is not None:  # in place into fresh zeros: no copy of them
            part = part.new_zeros(len(self.rows) * self.width, *x.shape[1:]).index_copy_(0, self.slots, part)
        return part.view(len(self.rows), self.width, *x.shape[1:])

    def real(self, grid: torch.Tensor) -> torch.Tensor:
        """[rows, width, ...] -> this grid's [tokens, ...]."""
        flat = grid.reshape(-1, *grid.shape[2:])
        return flat if self.slots is None else flat.index_select(0, self.slots)

    def attention(self, layer: "LayerAttention", batch: int) -> "LayerAttention":
        """A layer's mask and rotary tables for this grid: its rows, its first ``width`` positions."""
        mask, rotary = layer.mask, layer.rotary
        if mask is not None:
            if mask.shape[0] == batch:
                mask = mask.index_select(0, self.rows)
            mask = mask[..., : self.width, : self.width] if mask.shape[-2] > 1 else mask[..., : self.width]
        if rotary is not None:
            rotary = tuple(t[: self.width] for t in rotary)
        return LayerAttention(mask, rotary)


@dataclasses.dataclass
class Unpadded:
    """The real tokens of a padded batch laid end to end (the rows longest first): ``index`` holds their
    places in the flattened [batch * seq] batch, ``shape`` is (batch, seq); attention runs on ``grids``,
    rows of similar length padded to their own longest. Where the padding is not all at the right of
    each row, one grid of the whole padded batch."""

    index: torch.Tensor
    shape: tuple[int, int]
    grids: list[AttentionGrid]

    @classmethod
    def of(cls, attention_mask: torch.Tensor) -> "Unpadded":
        batch, seq = attention_mask.shape
        mask = attention_mask.bool()
        lengths = mask.sum(1)
        if not torch.equal(mask, torch.arange(seq, device=mask.device) < lengths[:, None]):
            index = mask.flatten().nonzero().squeeze(1)
            rows = torch.arange(batch, device=mask.device)
            return cls(index, (batch, seq), [AttentionGrid(rows, seq, slice(0, len(index)), index)])
        order = lengths.argsort(descending=True, stable=True)
        sorted_lengths = lengths[order].tolist()
        starts = length_groups(sorted_lengths, ATTENTION_GRID_COST)
        place = mask[order].flatten().nonzero().squeeze(1)  # in the batch with its rows sorted
        row, column = place // seq, place % seq
        index = order[row] * seq + column
        grids, first_token = [], 0
        for start, end in zip(starts, starts[1:] + [batch]):
            width, count = sorted_lengths[start], sum(sorted_lengths[start:end])
            tokens = slice(first_token, first_token + count)
            full = sorted_lengths[end - 1] == width
            slots = None if full else (row[tokens] - start) * width + column[tokens]
            grids.append(AttentionGrid(order[start:end], width, tokens, slots))
            first_token += count
        return cls(index, (batch, seq), grids)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, seq, ...] -> [tokens, ...]."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[tokens, ...] -> [batch, seq, ...], zeros at the padding."""
        out = x.new_zeros(self.shape[0] * self.shape[1], *x.shape[1:])
        return out.index_copy_(0, self.index, x).view(*self.shape, *x.shape[1:])  # in place: no copy of the zeros


@dataclasses.dataclass
class LayerAttention:
    """What a layer's attention needs beyond its input: the mask (boolean, True = attend, or an additive
    float bias: ALiBi's), the rotary (cos, sin) [seq, head_dim] where positions rotate, and where the
    layers run on the real tokens alone, how they sit in the padded batch and each grid's own mask and
    tables (``grid_attention``)."""

    mask: torch.Tensor | None = None
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    unpadded: Unpadded | None = None
    grid_attention: list["LayerAttention"] | None = None

    def on_real_tokens(self, unpadded: Unpadded) -> "LayerAttention":
        return LayerAttention(self.mask, self.rotary, unpadded,
                              [grid.attention(self, unpadded.shape[0]) for grid in unpadded.grids])


def rotate(x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """RoFormer's rotation of each (i, i + head_dim / 2) pair of dimensions (the half-split layout of
    GPT-NeoX and ModernBERT), computed in float32."""
    cos, sin = rotary
    x32 = x.float()
    half = x32.shape[-1] // 2
    rotated = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    return (x32 * cos + rotated * sin).to(x.dtype)


def rotary_tables(seq_len: int, head_dim: int, base: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    inverse = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.arange(seq_len, dtype=torch.float32, device=device)[:, None] * inverse
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: the geometric sequence 2^(-8/n), 2^(-16/n), ... for n heads a power of
    two; otherwise those of the power of two below, then every other one of the next (Press et al. 2022)."""
    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    below = 2 ** int(torch.log2(torch.tensor(float(heads))).floor())
    slopes = powers(below) + (powers(2 * below)[0::2][: heads - below] if below < heads else [])
    return torch.tensor(slopes)


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size, bias=config.dense_bias)
        self.key = nn.Linear(config.hidden_size, config.hidden_size, bias=config.dense_bias)
        self.value = nn.Linear(config.hidden_size, config.hidden_size, bias=config.dense_bias)
        self.dropout_p = config.attention_probs_dropout_prob

    def project_qkv(self, x: torch.Tensor, joined: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | torch.Tensor:
        """query, key and value of x. In training one matrix product over the three weights side by
        side: under autocast x is cast to bf16 once instead of three times, and its gradient comes from
        one product instead of three summed. Without gradients three products, which spares copying the
        weights together (a small batch's inference: 45 against 50 ms for BERT-base, 1 x 32 tokens, fp32).
        The parameters stay HuggingFace's three Linears. ``joined``: the three side by side, one tensor."""
        if not torch.is_grad_enabled():
            qkv = self.query(x), self.key(x), self.value(x)
            return torch.cat(qkv, dim=-1) if joined else qkv
        weight = torch.cat((self.query.weight, self.key.weight, self.value.weight))
        bias = None if self.query.bias is None else torch.cat((self.query.bias, self.key.bias, self.value.bias))
        out = F.linear(x, weight, bias)
        return out if joined else out.split(x.shape[-1], dim=-1)

    def forward(self, x: torch.Tensor, attention: LayerAttention,
                output_attentions: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The attended values; with ``output_attentions`` also the probabilities [batch, heads, query,
        key], computed explicitly (softmax(QK^T/sqrt(d) + mask)) instead of by the fused kernel, which
        never materialises them. Without it the computation is exactly the training path. With
        ``attention.unpadded`` x is [tokens, hidden]: the projections run on the real tokens, attention on
        each grid of rows of similar length, padded to the grid's longest."""
        if not isinstance(attention, LayerAttention):  # a bare mask
            attention = LayerAttention(attention)
        unpadded = attention.unpadded
        if unpadded is None:
            return self.attend(*self.project_qkv(x), attention, output_attentions)
        qkv = self.project_qkv(x, joined=True)  # [tokens, 3 * hidden]: laid out on each grid at once
        return torch.cat([grid.real(self.attend(*grid.lay_out(qkv).split(x.shape[-1], dim=-1), grid_attention))
                          for grid, grid_attention in zip(unpadded.grids, attention.grid_attention)])

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention: LayerAttention,
               output_attentions: bool = False):
        """Query, key and value [batch, seq, hidden] -> the attended values [batch, seq, hidden]."""
        batch, seq_len = q.shape[:2]
        q, k, v = (t.view(batch, seq_len, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if attention.rotary is not None:
            q, k = rotate(q, attention.rotary), rotate(k, attention.rotary)
        attn_mask = attention.mask
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(q.dtype)
        p = self.dropout_p if self.training else 0.0
        if output_attentions:
            probs = attention_probabilities(q, k, attn_mask)
            out = torch.matmul(dropout(probs, p, True) if p else probs, v)
        elif p and q.device.type == "cpu":
            out = _attention_with_cpu_dropout(q, k, v, attn_mask, p)
        else:  # SDPA: fused kernels, with their own dropout on GPU
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        out = out.transpose(1, 2).reshape(batch, seq_len, -1)
        return (out, probs) if output_attentions else out


def attention_probabilities(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) + mask) over the keys: a boolean mask's masked keys exactly 0, a float mask
    added (ALiBi's bias, -inf where masked)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if attn_mask is not None:
        scores = scores + attn_mask if attn_mask.is_floating_point() else scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _attention_with_cpu_dropout(q, k, v, attn_mask, p: float) -> torch.Tensor:
    """SDPA's own arithmetic, spelled out so the probabilities go through the fast CPU dropout (SDPA
    falls back to this path on CPU whenever dropout is on, with torch's slower Bernoulli sampling)."""
    return torch.matmul(dropout(attention_probabilities(q, k, attn_mask), p, True), v)


class BertSelfOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.dense_bias)
        self.LayerNorm = layer_norm(config)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.pre_ln = config.layer_norm_position == "pre"  # then LayerNorm is applied to the sub-layer's input

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            return self.dropout(self.dense(hidden)) + residual
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)  # post-LN


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, normalise_input: bool = True):
        """``normalise_input=False``: a pre-LN layer that leaves its attention input as it is (ModernBERT's
        first layer, model.first_attention_norm); the LayerNorm is then not built."""
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)
        self.normalise_input = self.output.pre_ln and normalise_input
        if self.output.pre_ln and not normalise_input:
            del self.output.LayerNorm

    def forward(self, x: torch.Tensor, attention: LayerAttention, output_attentions: bool = False):
        inputs = self.output.LayerNorm(x) if self.normalise_input else x
        if output_attentions:
            attended, probs = self.self(inputs, attention, output_attentions=True)
            return self.output(attended, x), probs
        return self.output(self.self(inputs, attention), x)


class BertIntermediate(nn.Module):
    """The feed-forward's first half: dense and activation; with ``feed_forward=glu`` the dense layer is
    twice as wide, and its first half, activated, is multiplied by its second half (ModernBERT's ``Wi``
    layout)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.glu = config.feed_forward == "glu"
        width = config.intermediate_size * (2 if self.glu else 1)
        self.dense = nn.Linear(config.hidden_size, width, bias=config.dense_bias)
        self.act = _activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.glu:
            value, gate = self.dense(x).chunk(2, dim=-1)
            return self.act(value) * gate
        return self.act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.dense_bias)
        self.LayerNorm = layer_norm(config)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.pre_ln = config.layer_norm_position == "pre"

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if self.pre_ln:
            return self.dropout(self.dense(hidden)) + residual
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, first: bool = False):
        super().__init__()
        self.attention = BertAttention(config, normalise_input=config.first_attention_norm or not first)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: torch.Tensor, attention: LayerAttention, output_attentions: bool = False):
        probs = None
        if output_attentions:
            attended, probs = self.attention(x, attention, output_attentions=True)
        else:
            attended = self.attention(x, attention)
        inputs = self.output.LayerNorm(attended) if self.output.pre_ln else attended
        out = self.output(self.intermediate(inputs), attended)
        return (out, probs) if output_attentions else out


class BertEncoder(nn.Module):
    """The layers; with ``embedding_size`` first ALBERT's projection of the embeddings to the hidden size
    (HuggingFace ALBERT's name, ``embedding_hidden_mapping_in``), with ``share_layers`` one layer's
    weights (``layer.0``) applied ``num_hidden_layers`` times."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_hidden_layers = config.num_hidden_layers
        self.gradient_checkpointing = config.gradient_checkpointing
        self.is_global = [config.layer_is_global(i) for i in range(config.num_hidden_layers)]
        if config.embedding_size is not None:
            self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        self.layer = nn.ModuleList(BertLayer(config, first=i == 0)
                                   for i in range(1 if config.share_layers else config.num_hidden_layers))
        if config.has_final_norm:  # with pre-LN the residual stream is never normalised inside the layers
            self.LayerNorm = layer_norm(config)

    def layers(self):
        """The layer applied at each depth (the same module every time with shared layers)."""
        if len(self.layer) == self.num_hidden_layers:
            return list(self.layer)
        return [self.layer[0]] * self.num_hidden_layers

    def forward(self, x: torch.Tensor, attention: dict[bool, LayerAttention] | torch.Tensor | None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> torch.Tensor | tuple:
        """The last layer's output; with ``output_hidden_states`` also every layer's, from the same pass:
        [embeddings, layer 1, ..., layer L] as HuggingFace's ``hidden_states``. With
        ``output_attentions``: (output, hidden states or None, [each layer's attention probabilities]).
        ``attention``: each kind of layer's (global: True, local: False) :class:`LayerAttention`, or one
        mask for every layer."""
        if not isinstance(attention, dict):
            attention = dict.fromkeys((True, False), LayerAttention(attention))
        if hasattr(self, "embedding_hidden_mapping_in"):
            x = self.embedding_hidden_mapping_in(x)
        hidden, attentions = [x], []
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer, is_global in zip(self.layers(), self.is_global):
            if output_attentions:
                x, probs = layer(x, attention[is_global], output_attentions=True)
                attentions.append(probs)
            elif recompute:  # torch restores the random state, so the recomputed dropout masks are the same
                x = torch.utils.checkpoint.checkpoint(layer, x, attention[is_global], use_reentrant=False)
            else:
                x = layer(x, attention[is_global])
            if output_hidden_states:
                hidden.append(x)
        if hasattr(self, "LayerNorm"):
            x = self.LayerNorm(x)
            if output_hidden_states:
                hidden[-1] = x  # the last layer's output as the heads see it
        if output_attentions:
            return x, (hidden if output_hidden_states else None), attentions
        return (x, hidden) if output_hidden_states else x


class BertPooler(nn.Module):
    """dense + tanh on [CLS]; on a causal model on the last (non-padding) token, the only position that
    has seen the whole input."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.causal = config.causal
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.dense_bias)

    def forward(self, sequence_output: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return torch.tanh(self.dense(sentence_token(sequence_output, attention_mask, self.causal)))


class BertPreTrainedModel(nn.Module):
    """Shared initialisation: normal(0, initializer_range) weights (truncated at two standard deviations
    with ``initializer="truncated_normal"``, as the original's ``truncated_normal_initializer``), zero
    biases, LayerNorm 1/0."""

    config: BertConfig

    def _normal_(self, weight: torch.Tensor) -> None:
        std = self.config.initializer_range
        if self.config.initializer == "truncated_normal":
            nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.normal_(weight, mean=0.0, std=std)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            self._normal_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            self._normal_(module.weight)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)

    def init_weights(self) -> None:
        self.apply(self._init_weights)


def extended_attention_mask(attention_mask: torch.Tensor | None, causal: bool = False,
                            seq_len: int | None = None, device=None) -> torch.Tensor | None:
    """(batch, seq) 1/0 padding mask -> (batch, 1, 1, seq) boolean mask for SDPA (True = attend). With
    ``causal`` (batch, 1, seq, seq): a position also attends only to itself and the ones before it."""
    mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
    if not causal:
        return mask
    if seq_len is None:
        seq_len = attention_mask.shape[1]
    device = attention_mask.device if attention_mask is not None else device
    future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()[None, None]
    return future if mask is None else mask & future


def layer_attention(config: BertConfig, attention_mask: torch.Tensor | None, seq_len: int,
                    device) -> dict[bool, LayerAttention]:
    """Each kind of layer's (global: True, local: False) mask and rotary tables: the padding (and causal)
    mask, within ``local_attention // 2`` positions on the local layers, ALiBi's bias where positions are
    ALiBi's (then a float mask, -inf where masked)."""
    mask = extended_attention_mask(attention_mask, config.causal, seq_len, device)
    position = config.position_embedding_type
    if config.local_attention is None and position not in ("rotary", "alibi"):
        return dict.fromkeys((True, False), LayerAttention(mask))
    offsets = torch.arange(seq_len, device=device)
    distance = (offsets[None, :] - offsets[:, None]).abs()
    kinds = {}
    for is_global in sorted(set(config.layer_is_global(i) for i in range(config.num_hidden_layers))):
        kind_mask = mask
        if not is_global:  # each token still attends to itself, so no row (a padded one) is empty
            window = (distance <= config.local_attention // 2)[None, None]
            kind_mask = window if mask is None else (mask & window) | torch.eye(seq_len, dtype=torch.bool, device=device)
        if position == "alibi":
            bias = -alibi_slopes(config.num_attention_heads).to(device)[:, None, None] * distance
            kind_mask = bias[None] if kind_mask is None else bias[None].masked_fill(~kind_mask, float("-inf"))
        rotary = None
        if position == "rotary":
            base = config.rotary_base if is_global or config.rotary_local_base is None else config.rotary_local_base
            rotary = rotary_tables(seq_len, config.head_dim, base, device)
        kinds[is_global] = LayerAttention(kind_mask, rotary)
    return kinds


def auto_unpads(attention_mask: torch.Tensor) -> bool:
    """``model.unpad=auto``'s choice for a batch: its real tokens alone where at least UNPAD_AUTO_PADDING of
    it is padding (pre-training's 2 % measured 0.96x the padded path on a 2-core Xeon, MiniLM fp32)."""
    return bool(attention_mask.float().mean() <= 1 - UNPAD_AUTO_PADDING)


class BertModel(BertPreTrainedModel):
    def unpads(self, attention_mask: torch.Tensor | None, output_attentions: bool = False) -> bool:
        """Whether this batch runs on its real tokens alone (``model.unpad``): never without padding to
        remove, for attention probabilities (the attention tool's path) or on XLA, whose graphs need
        static shapes; with ``auto`` where at least UNPAD_AUTO_PADDING of the batch is padding."""
        unpad = self.config.unpad
        if not unpad or attention_mask is None:
            return False
        if output_attentions or attention_mask.device.type == "xla":
            if unpad is True:
                warnings.warn("model.unpad=true: this pass runs padded (attention probabilities, or XLA's static "
                              "shapes, need the padded batch)", stacklevel=3)
            return False
        return unpad is True or auto_unpads(attention_mask)

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        """``add_pooling_layer``: BERT's pooler, where the model's sentence heads read one
        (``classifier_head=pooler``)."""
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer and config.classifier_head == "pooler" else None
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> tuple:
        """Returns (sequence_output [batch, seq, hidden], pooled_output [batch, hidden] or None), and with
        ``output_hidden_states`` a third item: the embeddings and every layer's output (one pass). With
        ``output_attentions`` a last item: each layer's attention probabilities [batch, heads, seq, seq]
        (computed explicitly, only when asked: the default path is the fused kernel, unchanged)."""
        x = self.embeddings(input_ids, token_type_ids)
        mask = layer_attention(self.config, attention_mask, input_ids.shape[1], input_ids.device)
        unpadded = Unpadded.of(attention_mask) if self.unpads(attention_mask, output_attentions) else None
        if unpadded is not None:
            x = unpadded.pack(x)
            mask = {kind: m.on_real_tokens(unpadded) for kind, m in mask.items()}
        attentions = None
        if output_attentions:
            sequence_output, hidden, attentions = self.encoder(x, mask, output_hidden_states, True)
        else:
            out = self.encoder(x, mask, output_hidden_states)
            sequence_output, hidden = out if output_hidden_states else (out, None)
        if unpadded is not None:
            sequence_output = unpadded.unpack(sequence_output)
            hidden = [unpadded.unpack(h) for h in hidden] if hidden is not None else None
        pooled = self.pooler(sequence_output, attention_mask) if self.pooler is not None else None
        result = (sequence_output, pooled) + ((hidden,) if output_hidden_states else ())
        return result + ((attentions,) if output_attentions else ())


class BertPredictionHeadTransform(nn.Module):
    """dense, activation, norm: the masked-LM head's transform, and the task heads' with
    ``classifier_head=transform`` (ModernBERT's ``head``)."""

    def __init__(self, config: BertConfig, in_width: int | None = None, out_width: int | None = None):
        super().__init__()
        # by default to the embedding width, so the decoder can be the word embeddings (ALBERT's head with
        # embedding_size)
        out_width = out_width or config.embedding_width
        self.dense = nn.Linear(in_width or config.hidden_size, out_width, bias=config.dense_bias)
        self.act = _activation(config.hidden_act)
        self.LayerNorm = layer_norm(config, out_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class TaskHeadTransform:
    """A mixin for the task models (with :class:`LayerFeatures`): with ``classifier_head=transform`` the
    head's dense, activation and norm (``head``, ModernBERT's) from the features to the hidden size."""

    def _init_head_transform(self, config: BertConfig) -> int:
        """Builds the transform where the config has one; returns the width the classifier reads."""
        if config.classifier_head != "transform":
            return self.feature_width
        self.head = BertPredictionHeadTransform(config, self.feature_width, config.hidden_size)
        return config.hidden_size

    def transform_features(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features) if hasattr(self, "head") else features


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.vocab_size = config.vocab_size
        self.transform = BertPredictionHeadTransform(config) if config.mlm_head_transform else nn.Identity()
        # built with its own bias where there is one, as before the option, so that a seed draws the same weights
        self.decoder = nn.Linear(config.embedding_width, config.padded_vocab_size, bias=config.decoder_bias)
        if config.decoder_bias:
            self.bias = nn.Parameter(torch.zeros(config.padded_vocab_size))
            self.decoder.bias = self.bias  # one bias, reachable under both HuggingFace names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.decoder(self.transform(x))
        # the padding rows of a padded vocabulary are no token: never predicted, never scored
        return logits if logits.shape[-1] == self.vocab_size else logits[..., : self.vocab_size]


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def gather_positions(sequence_output: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """sequence_output [batch, seq, hidden], positions [batch, n] -> [batch, n, hidden]."""
    index = positions.unsqueeze(-1).expand(-1, -1, sequence_output.shape[-1])
    return torch.gather(sequence_output, 1, index)


class BertForPreTraining(BertPreTrainedModel):
    """BERT with the masked-LM head (scored only at the masked positions) and the NSP head."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()
        self.tie_weights()

    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (mlm_logits, nsp_logits).

        With ``masked_lm_positions`` [batch, n] the MLM logits are [batch, n, vocab]: only those
        positions go through the head, which is most of the head's cost saved. Without them every
        position is scored ([batch, seq, vocab]), as HuggingFace's dense head does.
        """
        sequence_output, pooled = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_lm_positions is not None:
            sequence_output = gather_positions(sequence_output, masked_lm_positions)
        nsp = self.cls.seq_relationship(pooled) if pooled is not None else None  # no pooler: no sentence task
        return self.cls.predictions(sequence_output), nsp


class BertForSequenceClassification(LayerFeatures, TaskHeadTransform, BertPreTrainedModel):
    """Dropout + linear on the pooled [CLS]; ``num_labels == 1`` is regression. With ``layers`` other than
    ``last`` (feature-based use, :mod:`bert_exp.model.features`) the head reads that combination of layers
    at [CLS] (the last token on a causal model) directly, without the pooler, which was trained on the
    last layer only. ``pooling="mean"``: the head reads the mean of the chosen features over the real
    tokens instead (no pooler): a model pre-trained without a sentence-level loss (MLM alone) has
    never trained its [CLS] output, which can stay the same for every input."""

    def __init__(self, config: BertConfig, num_labels: int = 2, classifier_dropout: float | None = None,
                 layers: str = "last", pooling: str = "cls"):
        super().__init__()
        self.config = config
        self.num_labels = num_labels
        if pooling not in POOLING_CHOICES:
            raise ValueError(f"pooling: {pooling!r} is not one of {POOLING_CHOICES}")
        self.pooling = pooling
        self._init_layer_features(config, layers)
        self.bert = BertModel(config)
        p = config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.dropout = Dropout(p)
        self.classifier = nn.Linear(self._init_head_transform(config), num_labels)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        features, pooled = self.encode(input_ids, token_type_ids, attention_mask)
        if self.pooling == "mean":
            pooled = mean_of_tokens(features, attention_mask)
        elif self.layers != "last" or pooled is None:
            pooled = sentence_token(features, attention_mask, self.config.causal)
        return self.classifier(self.dropout(self.transform_features(pooled)))

    @property
    def reads_pooler(self) -> bool:
        return self.pooling == "cls" and self.bert.pooler is not None


class BertForQuestionAnswering(LayerFeatures, TaskHeadTransform, BertPreTrainedModel):
    """Linear span head (start, end) on every token; no pooler, as HuggingFace's. ``layers``: the
    features it reads (:mod:`bert_exp.model.features`)."""

    def __init__(self, config: BertConfig, layers: str = "last"):
        super().__init__()
        self.config = config
        self._init_layer_features(config, layers)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(self._init_head_transform(config), 2)
        self.init_weights()

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        features, _ = self.encode(input_ids, token_type_ids, attention_mask)
        start, end = self.qa_outputs(self.transform_features(features)).unbind(-1)
        return start, end


TAGGER_HEADS = ("linear", "bilstm")


class BertForTokenClassification(LayerFeatures, TaskHeadTransform, BertPreTrainedModel):
    """Dropout + linear on every token; no pooler, as HuggingFace's. ``layers`` chooses the features
    (:mod:`bert_exp.model.features`; only ``last`` exports). ``head_type="bilstm"``: the paper's feature-based
    tagger, a two-layer bidirectional LSTM of ``lstm_size`` units each way (default: the hidden size)
    between the features and the linear layer."""

    def __init__(self, config: BertConfig, num_labels: int = 2, classifier_dropout: float | None = None,
                 layers: str = "last", head_type: str = "linear", lstm_size: int | None = None):
        super().__init__()
        if head_type not in TAGGER_HEADS:
            raise ValueError(f"head_type: {head_type!r} is not one of {TAGGER_HEADS}")
        self.config = config
        self.num_labels = num_labels
        self.head_type = head_type
        self._init_layer_features(config, layers)
        self.bert = BertModel(config, add_pooling_layer=False)
        p = config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout
        self.dropout = Dropout(p)
        width = self._init_head_transform(config)
        if head_type == "bilstm":
            self.lstm = nn.LSTM(width, lstm_size or config.hidden_size, num_layers=2, bidirectional=True,
                                batch_first=True)
            width = 2 * self.lstm.hidden_size
        self.classifier = nn.Linear(width, num_labels)
        self.init_weights()

    def features(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        return self.transform_features(self.encode(input_ids, token_type_ids, attention_mask)[0])

    def _bilstm(self, features: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The LSTM over each sequence's real tokens only (packed), padding positions left at zero."""
        if attention_mask is None:
            return self.lstm(features.float())[0]
        lengths = attention_mask.sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(features.float(), lengths, batch_first=True, enforce_sorted=False)
        output, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(output, batch_first=True, total_length=features.shape[1])[0]

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [batch, seq, num_labels]."""
        features = self.features(input_ids, token_type_ids, attention_mask)
        if self.head_type == "bilstm":
            with torch.autocast(features.device.type, enabled=False):  # LSTMs in fp32 (no bf16 CPU kernel)
                features = self._bilstm(features, attention_mask)
        return self.classifier(self.dropout(features))


class BertForMaskedLM(BertPreTrainedModel):
    """BERT with the masked-LM head only (no pooler, no NSP): ELECTRA's generator, and a causal LM's
    next-token head when given every position."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = nn.Module()
        self.cls.predictions = BertLMPredictionHead(config)
        self.init_weights()
        self.tie_weights()

    def tie_weights(self) -> None:
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, masked_lm_positions=None) -> torch.Tensor:
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)
        if masked_lm_positions is not None:
            sequence_output = gather_positions(sequence_output, masked_lm_positions)
        return self.cls.predictions(sequence_output)


def generator_config(config: BertConfig, size: float) -> BertConfig:
    """ELECTRA's generator: the discriminator's depth with ``size`` times its hidden and intermediate
    sizes (heads of the discriminator's width), reading the discriminator's embeddings through a
    projection (``embedding_size`` = the embeddings' width)."""
    hidden = max(config.head_dim, round(config.hidden_size * size / config.head_dim) * config.head_dim)
    return dataclasses.replace(config, hidden_size=hidden, num_attention_heads=hidden // config.head_dim,
                               intermediate_size=max(1, round(config.intermediate_size * size)),
                               embedding_size=config.embedding_width, causal=False)


class ElectraDiscriminatorPredictions(nn.Module):
    """Replaced-token detection: dense, activation, one logit per token (HuggingFace ELECTRA's names)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = _activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.act(self.dense(x))).squeeze(-1)


class ElectraForPreTraining(BertPreTrainedModel):
    """ELECTRA (Clark et al. 2020): a small generator (masked LM) and the discriminator, which is our
    BERT encoder under ``bert.`` (what fine-tuning starts from and export writes) with a replaced-token
    detection head. The two share the token, position and token-type embeddings (one module)."""

    def __init__(self, config: BertConfig, generator_size: float = 0.25):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.generator = BertForMaskedLM(generator_config(config, generator_size))
        self.init_weights()
        self.generator.bert.embeddings = self.bert.embeddings  # shared
        self.generator.tie_weights()

    def generate(self, input_ids, token_type_ids, attention_mask, masked_lm_positions) -> torch.Tensor:
        """The generator's MLM logits at the masked positions [batch, n, vocab]."""
        return self.generator(input_ids, token_type_ids, attention_mask, masked_lm_positions)

    def discriminate(self, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        """One replaced-or-original logit per token [batch, seq]."""
        sequence_output, _ = self.bert(input_ids, token_type_ids, attention_mask)
        return self.discriminator_predictions(sequence_output)


def num_parameters(module: nn.Module) -> int:
    """Parameters counted once each (the tied decoder weight is the word embedding)."""
    return sum(p.numel() for p in module.parameters())


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters by part, each counted once: ``embeddings`` (word, position and token-type embeddings,
    their LayerNorm, and ALBERT's projection to the hidden size), ``encoder`` (the layers), ``heads``
    (pooler, task heads, an ELECTRA generator: the rest), ``total`` and ``trainable``. BERT-base's
    embeddings are 23,837,184, ALBERT-base's (E=128, vocabulary 30,000) 4,005,120."""
    bert = model.bert if hasattr(model, "bert") else model
    seen: set[int] = set()

    def count(params) -> int:
        total = 0
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                total += p.numel()
        return total

    projection = getattr(bert.encoder, "embedding_hidden_mapping_in", None)
    embeddings = count(bert.embeddings.parameters()) + (count(projection.parameters()) if projection else 0)
    encoder = count(bert.encoder.parameters())
    heads = count(model.parameters())
    return {"total": embeddings + encoder + heads, "embeddings": embeddings, "encoder": encoder, "heads": heads,
            "trainable": sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())}


__all__ = ["BertModel", "BertForPreTraining", "BertForMaskedLM", "ElectraForPreTraining", "generator_config", "BertForSequenceClassification", "BertForQuestionAnswering",
           "BertForTokenClassification", "gather_positions", "num_parameters", "parameter_counts"]
