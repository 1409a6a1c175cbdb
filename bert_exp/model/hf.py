"""HuggingFace interop: a BERT, ALBERT or ELECTRA directory (config.json, safetensors (one file, or shards
with model.safetensors.index.json) or pytorch_model.bin, vocab) read into one :class:`Checkpoint` with
HuggingFace BERT parameter names, and :func:`save_hf_directory`, which writes one back out (as BERT, or
as ALBERT or ELECTRA where the model is one of those: bert_exp/model/hf_albert_electra.py) so that
transformers loads it with no missing or unexpected keys. Our own Lightning ``.ckpt`` files are read next
to the code that writes them: bert_exp/tasks/checkpoints.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError
from ..records import write_json
from . import hf_albert_electra as families
from . import hf_modernbert as modernbert
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
WEIGHTS_NAME = "model.safetensors"
# transformers' name for the map of a sharded model's tensors to its files (model-00001-of-00002.safetensors ...)
SHARD_INDEX_NAME = "model.safetensors.index.json"


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
    if model_type == "modernbert":
        return BertConfig.from_dict(modernbert.config_in(values, f"{path}/config.json")), values
    if model_type in families.NAMES:
        values = families.config_in(values, f"{path}/config.json")
    elif model_type != "bert":
        raise CheckpointError(f"{path}/config.json: model_type {model_type!r} is not bert, albert, electra or "
                              "modernbert")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path}/config.json: position_embedding_type must be absolute")
    act = values.get("hidden_act", "gelu")
    if act not in ACTIVATIONS_IN:
        raise CheckpointError(f"{path}/config.json: hidden_act {act!r} is not supported")
    return BertConfig.from_dict({**values, "hidden_act": ACTIVATIONS_IN[act]}), values


def read_shard_index(path: Path) -> dict[str, str]:
    """The weight_map of a sharded safetensors directory (model.safetensors.index.json: tensor name -> file),
    each file it names checked to be there."""
    index_path = path / SHARD_INDEX_NAME
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
        names = set(weight_map.values())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CheckpointError(f"{index_path}: not a safetensors index (a JSON object with a weight_map of "
                              "tensor names to files)") from None
    missing = sorted(name for name in names if not (path / str(name)).is_file())
    if missing or not names:
        raise CheckpointError(f"{index_path} names {', '.join(missing) or 'no files'}, which {path} lacks")
    return weight_map


def shard_files(path: Path) -> list[Path]:
    """The files of a sharded safetensors directory, in order of name."""
    return [path / name for name in sorted(set(read_shard_index(path).values()))]


def load_sharded_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A sharded safetensors model (transformers' layout: model.safetensors.index.json and the files its
    weight_map names) as one state dict; a tensor in another file than the index says is an error."""
    weight_map = read_shard_index(path)
    state: dict[str, torch.Tensor] = {}
    for name in sorted(set(weight_map.values())):
        for key, value in load_file(path / name).items():
            if weight_map.get(key) != name:
                raise CheckpointError(f"{path / name} holds {key}, which {path / SHARD_INDEX_NAME} places "
                                      f"{'in ' + weight_map[key] if key in weight_map else 'nowhere'}")
            state[key] = value
    absent = sorted(set(weight_map) - set(state))
    if absent:
        raise CheckpointError(f"{path / SHARD_INDEX_NAME} names tensors its files lack: {absent[:5]}")
    return state


def load_hf_directory(path: Path) -> Checkpoint:
    config, values = read_hf_config(path)
    if (path / WEIGHTS_NAME).is_file():
        state = load_file(path / WEIGHTS_NAME)
    elif (path / SHARD_INDEX_NAME).is_file():
        state = load_sharded_safetensors(path)
    elif (path / "pytorch_model.bin").is_file():
        state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise CheckpointError(f"{path} has config.json but neither model.safetensors nor pytorch_model.bin "
                              f"(nor a sharded model's {SHARD_INDEX_NAME})")
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
    lowercase = tokenizer is None  # a BPE tokenizer.json normalises by itself (ModernBERT's keeps the case)
    if (path / "tokenizer_config.json").is_file():
        lowercase = bool(json.loads((path / "tokenizer_config.json").read_text()).get("do_lower_case", lowercase))
    model_type = values.get("model_type", "bert")
    architecture = (values.get("architectures") or ["BertModel"])[0]
    if model_type == "bert":
        state, head = _normalise_keys(state), {arch: name for name, arch in HEADS.items()}.get(architecture)
    elif model_type == "modernbert":
        head = modernbert.head_in(architecture)
        state = modernbert.state_in(state, head)
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
    extra = {"pooling": values.get("classifier_pooling", "cls")} if model_type == "modernbert" else {}
    return Checkpoint(config, state, vocab, lowercase, head, num_labels, str(path), labels=labels,
                      tokenizer=tokenizer, extra=extra)


def export_family(ckpt: Checkpoint) -> str:
    """The HuggingFace family a model of ours is written as: modernbert where it has ModernBERT's marks
    (rotary positions, no token types, the transform before the task heads), else bert, albert or electra."""
    config = ckpt.config
    if config.position_embedding_type == "rotary" or not config.token_type_embeddings or config.classifier_head == "transform":
        return "modernbert"
    return families.export_family(config, ckpt.state_dict)


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
    family = export_family(ckpt)
    if family == "modernbert":
        return modernbert.config_out(ckpt.config, ckpt.head, values, ckpt.extra, ckpt.vocab)
    return values if family == "bert" else families.config_out(family, ckpt.config, ckpt.head, values)


def check_exportable(ckpt: Checkpoint, family: str = "bert") -> None:
    """Refuses a model that the HuggingFace family it would be written as (bert, albert, electra,
    modernbert) cannot reproduce (a causal mask, pre-LN layers; shared layers in ELECTRA; ModernBERT with
    learned positions): transformers would load it with other weights, or attend differently."""
    if family == "modernbert":
        options = modernbert.unexpressed(ckpt.config)
    else:
        options = {k: v for k, v in ckpt.config.non_bert_options().items() if k not in families.EXPRESSES[family]}
    if options:
        settings = ", ".join(f"model.{k}={v}" for k, v in options.items())
        raise CheckpointError(f"{ckpt.source}: a model with {settings} has no HuggingFace {family.upper()} equivalent "
                              "and cannot be exported as one (bert_exp itself fine-tunes from the run directory or .ckpt)")


def save_hf_directory(ckpt: Checkpoint, out_dir: str | Path, dtype: torch.dtype | None = None,
                      max_shard_bytes: int | None = None) -> Path:
    """Writes ``model.safetensors``, ``config.json``, the vocabulary and the tokenizer config: ``vocab.txt``
    for WordPiece (BertTokenizer), ``tokenizer.json`` alone for a byte-level BPE (no vocab.txt, which
    cannot hold its merges; transformers' AutoTokenizer loads it as a fast tokenizer). For an ELECTRA
    model also the generator's, into ``generator/``.

    ``dtype`` casts the floating-point weights (torch.bfloat16 halves the files; None keeps the
    checkpoint's). ``max_shard_bytes`` splits weights larger than that into shards as transformers does
    (:func:`save_weights`)."""
    out = Path(out_dir)
    family = export_family(ckpt)
    check_exportable(ckpt, family)
    if out.exists() and any(out.iterdir()):
        raise CheckpointError(f"{out} exists and is not empty; choose a new directory (nothing is overwritten)")
    state = {k: v.detach().to("cpu").contiguous() for k, v in ckpt.state_dict.items() if not k.endswith(TIED_KEYS)}
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    if ckpt.head in ("question_answering", "token_classification"):  # HuggingFace's have no pooler
        state = {k: v for k, v in state.items() if not k.startswith("bert.pooler.")}
    weight = state.get("classifier.weight", state.get("qa_outputs.weight"))
    if ckpt.extra.get("pooling", "cls") != "cls" and family != "modernbert":  # ModernBERT's classifier_pooling
        raise CheckpointError(f"{ckpt.source}: a classifier on the mean of the tokens (task.module.pooling=mean) has "
                              f"no HuggingFace {HEADS[ckpt.head]} equivalent (it reads the pooled [CLS]); it cannot "
                              "be exported")
    if (ckpt.extra.get("layers", "last") != "last" or any(k.startswith(("mix_", "lstm.")) for k in state)
            or (weight is not None and weight.ndim == 2 and weight.shape[1] != ckpt.config.hidden_size)):
        raise CheckpointError(f"{ckpt.source}: a head on layers other than the last (task.module.layers) or on a "
                              f"BiLSTM (task.module.head_type) has no HuggingFace {HEADS[ckpt.head]} equivalent; "
                              "it cannot be exported")
    if family == "modernbert":
        files = {"": (modernbert.state_out(state, ckpt.head), hf_config_dict(ckpt))}
    elif family != "bert":
        files = families.export_files(family, ckpt.config, ckpt.head, state, hf_config_dict(ckpt), ckpt.source)
    elif ckpt.head is None:  # a headless BertModel is saved without the "bert." prefix
        files = {"": ({k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}, hf_config_dict(ckpt))}
    else:
        files = {"": (state, hf_config_dict(ckpt))}
    for sub, (tensors, values) in files.items():
        _write_directory(ckpt, out / sub, tensors, values, max_shard_bytes)
    return out


def save_weights(state: dict[str, torch.Tensor], out: Path, max_shard_bytes: int | None = None) -> list[Path]:
    """``model.safetensors``; or, where the tensors take more than ``max_shard_bytes``, transformers' sharded
    layout: ``model-00001-of-0000N.safetensors`` ... (tensors in their order, a shard closed before the
    tensor that would take it past the limit; a tensor larger than the limit gets a shard of its own)
    and ``model.safetensors.index.json`` naming each tensor's file. Returns the files written."""
    metadata = {"format": "pt"}
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, value in state.items():
        nbytes = value.numel() * value.element_size()
        if max_shard_bytes is not None and shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = value
        size += nbytes
    if len(shards) == 1:
        save_file(state, str(out / WEIGHTS_NAME), metadata=metadata)
        return [out / WEIGHTS_NAME]
    weight_map, written = {}, []
    for number, shard in enumerate(shards, 1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / name), metadata=metadata)
        weight_map.update(dict.fromkeys(shard, name))
        written.append(out / name)
    total = sum(v.numel() * v.element_size() for v in state.values())
    write_json(out / SHARD_INDEX_NAME, {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    return [*written, out / SHARD_INDEX_NAME]


def _write_directory(ckpt: Checkpoint, out: Path, state: dict[str, torch.Tensor], values: dict,
                     max_shard_bytes: int | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    save_weights(state, out, max_shard_bytes)
    write_json(out / "config.json", values, indent=2, sort_keys=True)
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "mask_token": "[MASK]"}
    if ckpt.tokenizer:
        (out / "tokenizer.json").write_text(ckpt.tokenizer, encoding="utf-8")
        write_json(out / "special_tokens_map.json", specials, indent=2)
        write_json(out / "tokenizer_config.json",
                   {"do_lower_case": ckpt.lowercase, "tokenizer_class": "PreTrainedTokenizerFast",
                    "model_max_length": ckpt.config.max_position_embeddings,
                    "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]
                    if ckpt.config.token_type_embeddings else ["input_ids", "attention_mask"], **specials}, indent=2)
    elif ckpt.vocab:
        (out / "vocab.txt").write_text("\n".join(ckpt.vocab) + "\n", encoding="utf-8")
        write_json(out / "special_tokens_map.json", specials, indent=2)
        write_json(out / "tokenizer_config.json",
                   {"do_lower_case": ckpt.lowercase, "tokenizer_class": "BertTokenizer",
                    "model_max_length": ckpt.config.max_position_embeddings, **specials}, indent=2)
