"""HuggingFace ModernBERT directories in and out (transformers' ``modeling_modernbert``; Warner et al. 2024,
answerdotai/ModernBERT): the config fields and parameter names only (bert_exp/model/hf.py reads and
writes the files).

ModernBERT is our encoder with ModernBERT's options (:data:`FIXED`: rotary positions, a GLU
feed-forward, pre-LN without the first layer's attention norm, a final norm, no token types, the task
heads' dense-activation-norm transform) and any of its free ones (biases, rotary bases, the local window
and how often a layer is global). Its fused ``Wqkv`` is our query, key and value stacked (in that
order, as :meth:`BertSelfAttention.project_qkv` stacks them); the rest is a renaming.
"""

from __future__ import annotations

import torch

from ..errors import CheckpointError
from .config import BertConfig
from .hf_albert_electra import rename

# the options a ModernBERT has, always
FIXED = dict(position_embedding_type="rotary", feed_forward="glu", layer_norm_position="pre", first_attention_norm=False,
             embedding_norm=True, has_final_norm=True, token_type_embeddings=False, classifier_head="transform",
             mlm_head_transform=True, causal=False, embedding_size=None, share_layers=False)
ACTIVATIONS_IN = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "silu": "silu",
                  "swish": "silu", "relu": "relu"}
ACTIVATIONS_OUT = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "silu": "silu", "relu": "relu"}
HEADS = {"pretraining": "ModernBertForMaskedLM", "classification": "ModernBertForSequenceClassification",
         "question_answering": "ModernBertForQuestionAnswering",
         "token_classification": "ModernBertForTokenClassification", None: "ModernBertModel"}
# (ours, theirs) name prefixes; {n}: a layer number
LAYER = (("attention.output.LayerNorm.", "attn_norm."), ("attention.output.dense.", "attn.Wo."),
         ("output.LayerNorm.", "mlp_norm."), ("intermediate.dense.", "mlp.Wi."), ("output.dense.", "mlp.Wo."))
ENCODER = tuple((f"bert.encoder.layer.{{n}}.{ours}", f"model.layers.{{n}}.{theirs}") for ours, theirs in LAYER) + (
    ("bert.embeddings.word_embeddings.", "model.embeddings.tok_embeddings."),
    ("bert.embeddings.LayerNorm.", "model.embeddings.norm."),
    ("bert.encoder.LayerNorm.", "model.final_norm."),
)
# the head's transform: the masked-LM head's, or a task head's
MLM_HEAD = (("cls.predictions.transform.dense.", "head.dense."), ("cls.predictions.transform.LayerNorm.", "head.norm."),
            ("cls.predictions.bias", "decoder.bias"))
TASK_HEAD = (("head.LayerNorm.", "head.norm."),)
QKV = ("query", "key", "value")
# transformers' ModernBertConfig defaults, for a config.json that leaves fields out
DEFAULTS = dict(vocab_size=50368, hidden_size=768, intermediate_size=1152, num_hidden_layers=22, num_attention_heads=12,
                hidden_activation="gelu", max_position_embeddings=8192, initializer_range=0.02, norm_eps=1e-5,
                norm_bias=False, pad_token_id=50283, attention_bias=False, attention_dropout=0.0, local_attention=128,
                embedding_dropout=0.0, mlp_bias=False, decoder_bias=True, classifier_bias=False,
                classifier_activation="gelu", classifier_pooling="cls", global_attn_every_n_layers=3,
                global_rope_theta=160000.0, local_rope_theta=10000.0)


def _names(head: str | None) -> tuple:
    if head == "pretraining":
        return ENCODER + MLM_HEAD
    return ENCODER + TASK_HEAD + ((("qa_outputs.", "classifier."),) if head == "question_answering" else ())


def head_in(architecture: str | None) -> str | None:
    return {arch: head for head, arch in HEADS.items()}.get(architecture)


def _period(layer_types: list[str], where: str) -> int | None:
    """How often a layer is global in ``layer_types`` (layer 0 global, then every N-th), None when all are."""
    if all(t == "full_attention" for t in layer_types):
        return None
    every = next(i for i, t in enumerate(layer_types[1:], 1) if t == "full_attention") if \
        "full_attention" in layer_types[1:] else len(layer_types)
    expected = ["full_attention" if i % every == 0 else "sliding_attention" for i in range(len(layer_types))]
    if layer_types != expected:
        raise CheckpointError(f"{where}: layer_types {layer_types} is not a global layer every N layers from the "
                              "first, the one pattern of local and global layers here")
    return every


def config_in(values: dict, where: str) -> dict:
    """A ModernBERT config.json's values as BertConfig's."""
    values = {**DEFAULTS, **values}
    act = values["hidden_activation"]
    if act not in ACTIVATIONS_IN:
        raise CheckpointError(f"{where}: hidden_activation {act!r} is not supported")
    if values["classifier_activation"] != act:
        raise CheckpointError(f"{where}: classifier_activation {values['classifier_activation']!r} differs from "
                              f"hidden_activation {act!r}; here the head's activation is the model's (model.hidden_act)")
    biases = {k: values[k] for k in ("attention_bias", "mlp_bias", "classifier_bias")}
    if len(set(biases.values())) > 1:
        raise CheckpointError(f"{where}: {', '.join(f'{k}={v}' for k, v in biases.items())}: here one setting "
                              "(model.dense_bias) holds for every dense layer")
    layers = values["num_hidden_layers"]
    layer_types = values.get("layer_types") or [
        "full_attention" if i % values["global_attn_every_n_layers"] == 0 else "sliding_attention" for i in range(layers)]
    every = _period(list(layer_types), where)
    rope = values.get("rope_parameters") or {}
    bases = {}
    for kind, legacy in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        params = rope.get(kind) or {}
        if params.get("rope_type", "default") != "default":
            raise CheckpointError(f"{where}: rope_parameters.{kind}.rope_type {params['rope_type']!r}: only the "
                                  "default rotary embedding is supported")
        bases[kind] = float(params.get("rope_theta", values[legacy]))
    local_base = bases["sliding_attention"] if every is not None else None
    return dict(
        vocab_size=values["vocab_size"], hidden_size=values["hidden_size"], num_hidden_layers=layers,
        num_attention_heads=values["num_attention_heads"], intermediate_size=values["intermediate_size"],
        hidden_act=ACTIVATIONS_IN[act], max_position_embeddings=values["max_position_embeddings"],
        initializer_range=values["initializer_range"], layer_norm_eps=values["norm_eps"],
        pad_token_id=values["pad_token_id"] if values["pad_token_id"] is not None else 0,
        hidden_dropout_prob=values["embedding_dropout"], attention_probs_dropout_prob=values["attention_dropout"],
        dense_bias=biases["attention_bias"], norm_bias=values["norm_bias"], decoder_bias=values["decoder_bias"],
        rotary_base=bases["full_attention"], rotary_local_base=None if local_base == bases["full_attention"] else local_base,
        local_attention=values["local_attention"] if every is not None else None, global_attention_every=every or 1,
        **{k: v for k, v in FIXED.items() if k != "has_final_norm"}, final_norm=None)


def state_in(state: dict[str, torch.Tensor], head: str | None) -> dict[str, torch.Tensor]:
    """A ModernBERT state dict (``model.`` prefix, or none for a headless ModernBertModel) with our names."""
    state = {("model." + k if k.startswith(("embeddings.", "layers.", "final_norm.")) else k): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k != "decoder.weight"}  # tied to the token embeddings
    out = {}
    for key, value in state.items():
        if key.startswith("model.layers.") and ".attn.Wqkv." in key:
            n, kind = key.split(".")[2], key.rsplit(".", 1)[1]
            for name, part in zip(QKV, value.chunk(3, dim=0)):
                out[f"bert.encoder.layer.{n}.attention.self.{name}.{kind}"] = part.clone()
        else:
            out[key] = value
    return rename(out, _names(head), reverse=True)


def unexpressed(config: BertConfig) -> dict:
    """The options a ModernBERT cannot have as this model has them (empty: exportable as ModernBERT)."""
    values = {**config.to_dict(), "has_final_norm": config.has_final_norm}
    return {k: values[k] for k, v in FIXED.items() if values[k] != v}


def config_out(config: BertConfig, head: str | None, values: dict, extra: dict, vocab: list[str] | None) -> dict:
    """The ModernBERT config.json: ``values`` are the BERT one's (for the label maps and dropout)."""
    layer_types = ["full_attention" if config.layer_is_global(i) else "sliding_attention"
                   for i in range(config.num_hidden_layers)]
    local_base = config.rotary_local_base if config.rotary_local_base is not None else config.rotary_base
    out = {k: values[k] for k in ("id2label", "label2id", "problem_type") if k in values}
    token_ids = {}
    if vocab:  # ModernBERT's special tokens are BERT's spellings
        index = {t: i for i, t in enumerate(vocab)}
        token_ids = {k: index[t] for k, t in (("cls_token_id", "[CLS]"), ("sep_token_id", "[SEP]"),
                                               ("bos_token_id", "[CLS]"), ("eos_token_id", "[SEP]")) if t in index}
    return {
        **out, **token_ids, "model_type": "modernbert", "architectures": [HEADS[head]],
        "vocab_size": config.padded_vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads, "hidden_activation": ACTIVATIONS_OUT[config.hidden_act],
        "classifier_activation": ACTIVATIONS_OUT[config.hidden_act],
        "max_position_embeddings": config.max_position_embeddings, "initializer_range": config.initializer_range,
        "norm_eps": config.layer_norm_eps, "norm_bias": config.norm_bias, "pad_token_id": config.pad_token_id,
        "attention_bias": config.dense_bias, "mlp_bias": config.dense_bias, "classifier_bias": config.dense_bias,
        "decoder_bias": config.decoder_bias, "layer_types": layer_types,
        "local_attention": config.local_attention or DEFAULTS["local_attention"],
        "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": config.rotary_base},
                            "sliding_attention": {"rope_type": "default", "rope_theta": local_base}},
        "embedding_dropout": config.hidden_dropout_prob, "attention_dropout": config.attention_probs_dropout_prob,
        "mlp_dropout": 0.0, "classifier_dropout": config.hidden_dropout_prob,
        "classifier_pooling": extra.get("pooling", "cls"), "tie_word_embeddings": True,
    }


def state_out(state: dict[str, torch.Tensor], head: str | None) -> dict[str, torch.Tensor]:
    """Our state dict (tied aliases left out) with ModernBERT's names; a headless model without ``model.``."""
    state = {k: v for k, v in state.items() if not k.startswith(("cls.seq_relationship.", "bert.pooler."))}
    out, qkv = {}, {}
    for key, value in state.items():
        parts = key.split(".")
        if key.startswith("bert.encoder.layer.") and parts[4:6] == ["attention", "self"]:
            qkv.setdefault((parts[3], parts[-1]), {})[parts[6]] = value
        else:
            out[key] = value
    theirs = rename(out, _names(head))
    for (n, kind), parts in qkv.items():
        theirs[f"model.layers.{n}.attn.Wqkv.{kind}"] = torch.cat([parts[name] for name in QKV])
    if head is None:
        theirs = {k.removeprefix("model."): v for k, v in theirs.items()}
    return theirs
