"""HuggingFace ALBERT and ELECTRA directories in and out: the parameter names and config fields only
(bert_exp/model/hf.py reads and writes the files, and does BERT).

* **ALBERT** (transformers' ``modeling_albert``): our model with ``embedding_size`` and/or
  ``share_layers``. Shared layers are one ALBERT layer group (``num_hidden_groups=1``), unshared ones a
  group per layer (``num_hidden_groups=num_hidden_layers``), one layer a group (``inner_group_num=1``):
  the ALBERT layouts we read. ALBERT always projects its embeddings, so a model without
  ``embedding_size`` is written with ``embedding_size=hidden_size`` and an identity projection.
  ``AlbertForPreTraining``'s sentence-order head is our ``cls.seq_relationship`` (label 1 = swapped).
* **ELECTRA** (``modeling_electra``): an ``objective=electra`` model. The discriminator (our encoder
  under ``bert.`` with ``discriminator_predictions``) is written as ``ElectraForPreTraining``, the
  generator into ``generator/`` as ``ElectraForMaskedLM`` (with a copy of the shared embeddings). Any
  ELECTRA directory reads in as an encoder (the discriminator, say) to fine-tune.

The tokenizer written stays ours, WordPiece (``vocab.txt``, ``tokenizer_class: BertTokenizer``), for
ALBERT too, whose own checkpoints come with SentencePiece: the equivalence is the model's.
"""

from __future__ import annotations

import logging
import re

import torch

from ..errors import CheckpointError
from .config import BertConfig

log = logging.getLogger(__name__)

# inside one layer: our (HuggingFace BERT) module -> ALBERT's
ALBERT_LAYER = {
    "attention.self.query": "attention.query", "attention.self.key": "attention.key",
    "attention.self.value": "attention.value", "attention.output.dense": "attention.dense",
    "attention.output.LayerNorm": "attention.LayerNorm", "intermediate.dense": "ffn",
    "output.dense": "ffn_output", "output.LayerNorm": "full_layer_layer_norm",
}
# (ours, theirs) name prefixes, the first match used in either direction; {n}: a layer (ALBERT: group) number.
# Names in neither (classifier., qa_outputs., discriminator_predictions.) are the same in both.
NAMES = {
    "albert": tuple((f"bert.encoder.layer.{{n}}.{ours}.", f"albert.encoder.albert_layer_groups.{{n}}.albert_layers.0.{theirs}.")
                    for ours, theirs in ALBERT_LAYER.items()) + (
        ("bert.pooler.dense.", "albert.pooler."),
        ("bert.", "albert."),
        ("cls.predictions.transform.dense.", "predictions.dense."),
        ("cls.predictions.transform.LayerNorm.", "predictions.LayerNorm."),
        ("cls.predictions.", "predictions."),
        ("cls.seq_relationship.", "sop_classifier.classifier."),
    ),
    "electra": (
        ("bert.encoder.embedding_hidden_mapping_in.", "electra.embeddings_project."),
        ("bert.", "electra."),
        ("cls.predictions.transform.dense.", "generator_predictions.dense."),  # the generator's head
        ("cls.predictions.transform.LayerNorm.", "generator_predictions.LayerNorm."),
        ("cls.predictions.bias", "generator_lm_head.bias"),
        ("cls.predictions.decoder.", "generator_lm_head."),  # tied to the word embeddings
    ),
}
HEADS = {  # our head -> architecture written; read back the other way (others: an encoder)
    "albert": {"pretraining": "AlbertForPreTraining", "classification": "AlbertForSequenceClassification",
               "question_answering": "AlbertForQuestionAnswering",
               "token_classification": "AlbertForTokenClassification", None: "AlbertModel"},
    "electra": {None: "ElectraForPreTraining"},
}
# transformers' AlbertConfig / ElectraConfig defaults, for a config.json that leaves fields out
DEFAULTS = {
    "albert": dict(vocab_size=30000, embedding_size=128, hidden_size=4096, num_hidden_layers=12, num_hidden_groups=1,
                   num_attention_heads=64, intermediate_size=16384, inner_group_num=1, hidden_act="gelu_new",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12),
    "electra": dict(vocab_size=30522, embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                    intermediate_size=1024, hidden_act="gelu", hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12),
}
# what each family expresses of our options beyond BERT (BertConfig.non_bert_options)
EXPRESSES = {"bert": (), "albert": ("embedding_size", "share_layers"), "electra": ("embedding_size",)}
DISCRIMINATOR = "discriminator_predictions.dense_prediction.weight"  # an ELECTRA model of ours has it


def rename(state: dict[str, torch.Tensor], names, reverse: bool = False) -> dict[str, torch.Tensor]:
    """Each key's first matching prefix in ``names`` swapped for its counterpart (theirs -> ours with
    ``reverse``); keys matching none are kept."""
    pairs = [(re.compile(re.escape(a).replace(r"\{n\}", r"(\d+)")), b)
             for a, b in ((t, o) if reverse else (o, t) for o, t in names)]
    out = {}
    for key, value in state.items():
        for pattern, target in pairs:
            match = pattern.match(key)
            if match:
                key = target.replace("{n}", match.group(1) if match.groups() else "") + key[match.end():]
                break
        out[key] = value
    return out


def export_family(config: BertConfig, state: dict) -> str:
    """The HuggingFace family a model of ours is written as: electra (an ELECTRA objective's model),
    albert (a factorised embedding or shared layers) or bert."""
    if DISCRIMINATOR in state:
        return "electra"
    return "albert" if config.embedding_size is not None or config.share_layers else "bert"


def config_in(values: dict, where: str) -> dict:
    """An ALBERT or ELECTRA config.json's values as BertConfig's (``embedding_size``, ``share_layers``)."""
    model_type = values["model_type"]
    values = {**DEFAULTS[model_type], **values}
    if model_type == "electra":  # no projection when the widths agree
        return {**values, "embedding_size": None if values["embedding_size"] == values["hidden_size"]
                else values["embedding_size"]}
    groups, inner, layers = values["num_hidden_groups"], values["inner_group_num"], values["num_hidden_layers"]
    if inner != 1 or groups not in (1, layers):
        raise CheckpointError(f"{where}: ALBERT with num_hidden_groups={groups}, inner_group_num={inner} has no "
                              "equivalent here (one layer a group, and one group or one a layer)")
    return {**values, "share_layers": groups < layers}


def state_in(state: dict[str, torch.Tensor], model_type: str) -> dict[str, torch.Tensor]:
    return rename(state, NAMES[model_type], reverse=True)


def head_in(model_type: str, architecture: str | None) -> str | None:
    return {arch: head for head, arch in HEADS[model_type].items()}.get(architecture)


def config_out(family: str, config: BertConfig, head: str | None, values: dict) -> dict:
    """The ALBERT or ELECTRA config.json from the BERT one (``values``)."""
    values = {**values, "model_type": family, "embedding_size": config.embedding_width,
              "architectures": [HEADS[family][head if family == "albert" else None]]}
    if family == "albert":
        values.update(inner_group_num=1, num_hidden_groups=1 if config.share_layers else config.num_hidden_layers)
    return values


def export_files(family: str, config: BertConfig, head: str | None, state: dict[str, torch.Tensor], values: dict,
                 source: str) -> dict[str, tuple[dict, dict]]:
    """{sub-directory ("" the directory itself): (tensors, config.json values)} for an ALBERT or ELECTRA
    export; ``state`` has our names (tied aliases left out), ``values`` are :func:`config_out`'s."""
    if family == "albert":
        if config.embedding_size is None:  # ALBERT always projects: the identity
            weight = state["bert.embeddings.word_embeddings.weight"]
            state = {**state, "bert.encoder.embedding_hidden_mapping_in.weight": torch.eye(config.hidden_size, dtype=weight.dtype),
                     "bert.encoder.embedding_hidden_mapping_in.bias": torch.zeros(config.hidden_size, dtype=weight.dtype)}
        theirs = rename(state, NAMES["albert"])
        if head is None:  # a headless AlbertModel is saved without the "albert." prefix
            theirs = {k.removeprefix("albert."): v for k, v in theirs.items()}
        return {"": (theirs, values)}
    if config.embedding_size == config.hidden_size:
        raise CheckpointError(f"{source}: model.embedding_size equal to model.hidden_size (a projection between "
                              "equal widths) has no HuggingFace ELECTRA equivalent")
    discriminator = {k: v for k, v in state.items() if not k.startswith(("generator.", "bert.pooler."))}
    files = {"": (rename(discriminator, NAMES["electra"]), values)}
    generator = _generator(config, state, values, source)
    if generator is not None:
        files["generator"] = generator
    return files


def _generator(config: BertConfig, state: dict, values: dict, source: str) -> tuple[dict, dict] | None:
    """The generator as ElectraForMaskedLM (its weights under ``generator.``, the shared embeddings), or
    None, with a warning, where transformers' ElectraForMaskedLM cannot reproduce it."""
    own = {k.removeprefix("generator."): v for k, v in state.items() if k.startswith("generator.")}
    if not own:
        return None
    hidden = own["bert.encoder.layer.0.attention.self.query.weight"].shape[0]
    reason = None
    if hidden == config.embedding_width:
        reason = "its hidden size equals the embeddings' (ElectraForMaskedLM then has no projection)"
    elif config.hidden_act != "gelu":
        reason = f"its head's activation is {config.hidden_act} (ElectraForMaskedLM's is always gelu)"
    if reason:
        log.warning("%s: the generator is not exported: %s", source, reason)
        return None
    shared = {k: v for k, v in state.items() if k.startswith("bert.embeddings.")}
    values = {**values, "architectures": ["ElectraForMaskedLM"], "hidden_size": hidden,
              "num_attention_heads": hidden // config.head_dim,
              "intermediate_size": own["bert.encoder.layer.0.intermediate.dense.weight"].shape[0]}
    return rename({**shared, **own}, NAMES["electra"]), values
