"""HuggingFace interop: a BERT, ALBERT or ELECTRA directory (config.json, safetensors or pytorch_model.bin,
vocab) read into one :class:`Checkpoint` with HuggingFace BERT parameter names, and
:func:`save_hf_directory`, which writes one back out (as BERT, or as ALBERT or ELECTRA where the model
is one of those: bert_exp/model/hf_albert_electra.py) so that transformers loads it with no missing or
unexpected keys. Our own Lightning ``.ckpt`` files are read next to the code that writes them:
bert_exp/tasks/checkpoints.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError
from ..records import write_json
from . import hf_albert_electra as families
from .config import BertConfig

HEADS = {  # our head name -> HuggingFace architecture
    "pretraining": "BertForPreTraining",
    "classification": "BertForSequenceClassification",
    "question_answering": "BertForQuestionAnswering",
    "token_classification": "BertForTokenClassification",
    None: "BertModel",
}
ACTIVATIONS_IN = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ACTIVATIONS_OUT = {"gelu": "gelu", "gelu_tanh": "gelu_new"}
# aliases of other parameters in our models (tied): never written, never reported missing
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


@dataclass
class Checkpoint:
    config: BertConfig
    state_dict: dict[str, torch.Tensor]  # HuggingFace names, encoder under "bert."
    vocab: list[str] | None = None
    lowercase: bool = True
    head: str | None = None  # pretraining | classification | question_answering | None (encoder only)
    num_labels: int | None = None
    source: str = ""
    extra: dict = field(default_factory=dict)
    labels: list[str] | None = None  # token classification: the label names (index = class id)
    tokenizer: str | None = field(default=None, repr=False)  # tokenizer.json of a byte-level BPE (else None)


def _normalise_keys(state: dict[str, torch.Tensor], prefix: str = "bert.") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if key.endswith(("position_ids", "embeddings.token_type_ids")):  # buffers, not weights
            continue
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if key.startswith(("embeddings", "encoder.", "pooler")):  # a headless BertModel (AlbertModel, ElectraModel)
            key = prefix + key
        out[key] = value
    return out


def read_vocab_file(path: Path) -> list[str]:
    return [line.rstrip("\r") for line in path.read_text(encoding="utf-8").split("\n") if line.rstrip("\r")]


def read_hf_config(path: Path) -> tuple[BertConfig, dict]:
    """A HuggingFace directory's config.json as our BertConfig (and its values), weights unread."""
    values = json.loads((path / "config.json").read_text())
    model_type = values.get("model_type", "bert")
    if model_type in families.NAMES:
        values = families.config_in(values, f"{path}/config.json")
    elif model_type != "bert":
        raise CheckpointError(f"{path}/config.json: model_type {model_type!r} is not bert, albert or electra")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path}/config.json: position_embedding_type must be absolute")
    act = values.get("hidden_act", "gelu")
    if act not in ACTIVATIONS_IN:
        raise CheckpointError(f"{path}/config.json: hidden_act {act!r} is not supported")
    return BertConfig.from_dict({**values, "hidden_act": ACTIVATIONS_IN[act]}), values


def load_hf_directory(path: Path) -> Checkpoint:
    config, values = read_hf_config(path)
    if (path / "model.safetensors").is_file():
        state = load_file(path / "model.safetensors")
    elif (path / "pytorch_model.bin").is_file():
        state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise CheckpointError(f"{path} has config.json but neither model.safetensors nor pytorch_model.bin")
    tokenizer = None
    if (path / "vocab.txt").is_file():
        vocab = read_vocab_file(path / "vocab.txt")
    elif (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer, models

        tokenizer = (path / "tokenizer.json").read_text(encoding="utf-8")
        tok = Tokenizer.from_str(tokenizer)
        if isinstance(tok.model, models.WordPiece):  # rebuilt from its tokens, as a vocab.txt
            vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
            tokenizer = None
        elif isinstance(tok.model, models.BPE):  # ours, byte-level BPE: kept whole
            vocab = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
        else:  # ALBERT's SentencePiece pieces are not a vocabulary we read: the data's is used
            vocab, tokenizer = None, None
    else:
        vocab = None
    lowercase = True
    if (path / "tokenizer_config.json").is_file():
        lowercase = bool(json.loads((path / "tokenizer_config.json").read_text()).get("do_lower_case", True))
    model_type = values.get("model_type", "bert")
    architecture = (values.get("architectures") or ["BertModel"])[0]
    if model_type == "bert":
        state, head = _normalise_keys(state), {arch: name for name, arch in HEADS.items()}.get(architecture)
    else:
        state = families.state_in(_normalise_keys(state, model_type + "."), model_type)
        head = families.head_in(model_type, architecture)
    num_labels = len(values["id2label"]) if head in ("classification", "token_classification") \
        and "id2label" in values else None
    if head == "classification" and num_labels is None:
        num_labels = values.get("num_labels", 2)
    labels = None
    if head == "token_classification" and "id2label" in values:
        labels = [values["id2label"][str(i)] for i in range(len(values["id2label"]))]
    return Checkpoint(config, state, vocab, lowercase, head, num_labels, str(path), labels=labels,
                      tokenizer=tokenizer)


def hf_config_dict(ckpt: Checkpoint) -> dict:
    """The config.json written for ``ckpt`` (BERT's, or ALBERT's or ELECTRA's: export_family)."""
    values = ckpt.config.hf_dict()
    values["hidden_act"] = ACTIVATIONS_OUT[values["hidden_act"]]
    values.update(architectures=[HEADS[ckpt.head]], model_type="bert", position_embedding_type="absolute")
    if ckpt.head == "classification":
        n = ckpt.num_labels or 2
        values.update(id2label={str(i): f"LABEL_{i}" for i in range(n)}, label2id={f"LABEL_{i}": i for i in range(n)},
                      problem_type="regression" if n == 1 else "single_label_classification")
    if ckpt.head == "token_classification":
        labels = ckpt.labels or [f"LABEL_{i}" for i in range(ckpt.num_labels or 2)]
        values.update(id2label={str(i): label for i, label in enumerate(labels)},
                      label2id={label: i for i, label in enumerate(labels)})
    family = families.export_family(ckpt.config, ckpt.state_dict)
    return values if family == "bert" else families.config_out(family, ckpt.config, ckpt.head, values)


def check_exportable(ckpt: Checkpoint, family: str = "bert") -> None:
    """Refuses a model that the HuggingFace family it would be written as (bert, albert, electra) cannot
    reproduce (a causal mask, pre-LN layers; shared layers in ELECTRA): transformers would load it with
    other weights, or attend differently."""
    options = {k: v for k, v in ckpt.config.non_bert_options().items() if k not in families.EXPRESSES[family]}
    if options:
        settings = ", ".join(f"model.{k}={v}" for k, v in options.items())
        raise CheckpointError(f"{ckpt.source}: a model with {settings} has no HuggingFace {family.upper()} equivalent "
                              "and cannot be exported as one (bert_exp itself fine-tunes from the run directory or .ckpt)")


def save_hf_directory(ckpt: Checkpoint, out_dir: str | Path) -> Path:
    """Writes ``model.safetensors``, ``config.json``, the vocabulary and the tokenizer config: ``vocab.txt``
    for WordPiece (BertTokenizer), ``tokenizer.json`` alone for a byte-level BPE (no vocab.txt, which
    cannot hold its merges; transformers' AutoTokenizer loads it as a fast tokenizer). For an ELECTRA
    model also the generator's, into ``generator/``."""
    out = Path(out_dir)
    family = families.export_family(ckpt.config, ckpt.state_dict)
    check_exportable(ckpt, family)
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"{out} exists and is not empty; choose a new directory (nothing is overwritten)")
    state = {k: v.detach().to("cpu").contiguous() for k, v in ckpt.state_dict.items() if not k.endswith(TIED_KEYS)}
    if ckpt.head in ("question_answering", "token_classification"):  # HuggingFace's have no pooler
        state = {k: v for k, v in state.items() if not k.startswith("bert.pooler.")}
    weight = state.get("classifier.weight", state.get("qa_outputs.weight"))
    if ckpt.extra.get("pooling", "cls") != "cls":
        raise CheckpointError(f"{ckpt.source}: a classifier on the mean of the tokens (task.module.pooling=mean) has "
                              f"no HuggingFace {HEADS[ckpt.head]} equivalent (it reads the pooled [CLS]); it cannot "
                              "be exported")
    if (ckpt.extra.get("layers", "last") != "last" or any(k.startswith(("mix_", "lstm.")) for k in state)
            or (weight is not None and weight.ndim == 2 and weight.shape[1] != ckpt.config.hidden_size)):
        raise CheckpointError(f"{ckpt.source}: a head on layers other than the last (task.module.layers) or on a "
                              f"BiLSTM (task.module.head_type) has no HuggingFace {HEADS[ckpt.head]} equivalent; "
                              "it cannot be exported")
    if family != "bert":
        files = families.export_files(family, ckpt.config, ckpt.head, state, hf_config_dict(ckpt), ckpt.source)
    elif ckpt.head is None:  # a headless BertModel is saved without the "bert." prefix
        files = {"": ({k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}, hf_config_dict(ckpt))}
    else:
        files = {"": (state, hf_config_dict(ckpt))}
    for sub, (tensors, values) in files.items():
        _write_directory(ckpt, out / sub, tensors, values)
    return out


def _write_directory(ckpt: Checkpoint, out: Path, state: dict[str, torch.Tensor], values: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    write_json(out / "config.json", values, indent=2, sort_keys=True)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]"}
    if ckpt.tokenizer:
        (out / "tokenizer.json").write_text(ckpt.tokenizer, encoding="utf-8")
        write_json(out / "special_tokens_map.json", specials, indent=2)
        write_json(out / "tokenizer_config.json",
                   {"do_lower_case": ckpt.lowercase, "tokenizer_class": "PreTrainedTokenizerFast",
                    "model_max_length": ckpt.config.max_position_embeddings,
                    "model_input_names": ["input_ids", "token_type_ids", "attention_mask"], **specials}, indent=2)
    elif ckpt.vocab:
        (out / "vocab.txt").write_text("\n".join(ckpt.vocab) + "\n", encoding="utf-8")
        write_json(out / "special_tokens_map.json", specials, indent=2)
        write_json(out / "tokenizer_config.json",
                   {"do_lower_case": ckpt.lowercase, "tokenizer_class": "BertTokenizer",
                    "model_max_length": ckpt.config.max_position_embeddings, **specials}, indent=2)
