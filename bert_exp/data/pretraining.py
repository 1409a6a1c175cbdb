"""LightningDataModule for MLM(+NSP) pre-training on a text corpus."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from tokenizers import Tokenizer

from .base import VocabularyDataModule
from .corpus import InstanceSettings, PretrainingDataset, build_corpus_cache, instance_layout
from .hashing import config_key
from .loading import LoaderSettings
from .masking import CausalLMCollator, MaskingSettings, PretrainingCollator, continuation_table
from .text import CorpusError, detect_format, expand_inputs, iter_documents
from .tokenizer import (
    KINDS,
    VocabularyError,
    atomic_directory,
    load_vocab_file,
    save_vocab,
    tokenizer_json,
    tokenizer_kind,
    train_byte_bpe,
    train_wordpiece,
    vocab_list,
)

log = logging.getLogger(__name__)


@dataclass
class TokenizerSpec:
    """Either ``vocab_file`` (load it) or the settings to train a vocabulary on the corpus: BERT's
    WordPiece or RoBERTa's byte-level BPE (``kind``)."""

    vocab_file: str | None = None  # a vocab.txt (WordPiece) or a tokenizer.json (either kind)
    kind: Literal["wordpiece", "byte_bpe"] = "wordpiece"
    vocab_size: int = 30522
    min_frequency: int = 2
    limit_alphabet: int = 1000  # wordpiece only
    lowercase: bool | None = None  # None: wordpiece lower-cases (BERT uncased), byte_bpe does not (RoBERTa)
    strip_accents: bool | None = None  # wordpiece only; None: strip when lower-casing, as BERT's uncased models do

    def __post_init__(self):
        if self.kind not in KINDS:
            raise VocabularyError(f"data.tokenizer.kind={self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.kind != "wordpiece" and self.strip_accents:
            raise VocabularyError("data.tokenizer.strip_accents=true: WordPiece only (byte_bpe keeps every character)")
        if self.lowercase is None:
            self.lowercase = self.kind == "wordpiece"

    @property
    def cache_fields(self) -> dict:
        """What keys the trained vocabulary's cache: every field (a WordPiece leaves ``kind`` out, the key
        of the vocabularies trained before there were kinds)."""
        fields = dict(self.__dict__)
        if self.kind == "wordpiece":
            del fields["kind"]
        return fields


INPUT_KEYS = {"path", "doc_boundary", "document_regex"}


def _parse_input(item) -> tuple[str, dict]:
    """A ``data.files`` entry: a path, directory or glob, or a mapping ``{path, doc_boundary,
    document_regex}`` giving those files their own document boundary (a mixture of corpora)."""
    if isinstance(item, Mapping):
        item = dict(item)
        unknown = set(item) - INPUT_KEYS
        if unknown or "path" not in item:
            raise CorpusError(f"data.files entry {item}: expected a path, or a mapping with 'path' and optionally "
                              f"'doc_boundary', 'document_regex' (unknown: {sorted(unknown) or 'none'})")
        options = {k: item[k] for k in ("doc_boundary", "document_regex") if k in item}
        if options.get("doc_boundary", "file") not in ("file", "blank_line", "regex"):
            raise CorpusError(f"data.files entry {item['path']}: doc_boundary={options['doc_boundary']!r}: expected "
                              "file, blank_line or regex")
        return str(item["path"]), options
    return str(item), {}


class PretrainingDataModule(VocabularyDataModule):
    """``files``: paths, directories or globs; an entry may also be a mapping ``{path: ...,
    doc_boundary: ..., document_regex: ...}`` whose files split into documents their own way (e.g.
    reviews a paragraph each beside books a file each)."""

    def __init__(
        self,
        files: list,
        tokenizer: TokenizerSpec,
        cache_dir: str,
        instances: InstanceSettings = InstanceSettings(),
        masking: MaskingSettings = MaskingSettings(),
        loader: LoaderSettings = LoaderSettings(),
        nsp: bool = True,
        objective: str = "mlm_nsp",
        packing: str | None = None,
        order_seed: int = 0,
        download: bool = True,
    ):
        """``instances``: what the cached instances are (their ``nsp`` and ``layout`` follow from
        ``objective``, ``packing`` and ``nsp``, whatever they hold); ``order_seed``: the training order
        and the dynamic masks (the run seed)."""
        super().__init__(tokenizer.vocab_file, tokenizer.lowercase, download, loader)
        loader.refuse_grouping("pre-training on a corpus")
        # the objective's instances (conf/objective): sentence pairs, or one of RoBERTa's packings
        pairs, layout = instance_layout(objective, packing, nsp)
        self.objective = objective if nsp else "mlm"
        self.inputs = [_parse_input(item) for item in files]
        self.files_spec = [path for path, _ in self.inputs]
        self.tokenizer_spec = tokenizer
        self.cache_dir = Path(cache_dir).expanduser()
        self.settings = dataclasses.replace(instances, nsp=pairs, layout=layout, file_boundaries=None)
        self.masking = masking
        self.order_seed = order_seed
        wanted = round(masking.masked_lm_prob * (instances.max_seq_length - 2))  # 76 at 512, as BERT base sets
        if self.objective != "clm" and wanted > masking.max_predictions_per_seq:
            log.warning("data.masking.max_predictions_per_seq=%d caps the masked share of a full sequence of %d "
                        "tokens at %.1f %% (data.masking.masked_lm_prob=%g asks for about %d): raise it to mask as "
                        "asked", masking.max_predictions_per_seq, instances.max_seq_length,
                        100 * masking.max_predictions_per_seq / (instances.max_seq_length - 2),
                        masking.masked_lm_prob, wanted)
        self._files: list[Path] | None = None
        self.datasets: dict[str, PretrainingDataset] = {}

    # -- inputs, tokenizer, cache ---------------------------------------------------------------

    @property
    def files(self) -> list[Path]:
        if self._files is None:
            files, boundaries = [], {}
            for path, options in self.inputs:
                for file in expand_inputs(path):
                    if options and str(file) not in boundaries and file not in files:
                        boundaries[str(file)] = [options.get("doc_boundary", self._settings.doc_boundary),
                                                 options.get("document_regex", self._settings.document_regex)]
                    files.append(file)
            self._files = list(dict.fromkeys(files))
            if boundaries:
                self._settings = dataclasses.replace(self._settings, file_boundaries=boundaries)
        return self._files

    @property
    def settings(self) -> InstanceSettings:
        """The instance settings, with the files' own document boundaries once the inputs are expanded."""
        self.files  # noqa: B018 - expands the inputs
        return self._settings

    @settings.setter
    def settings(self, value: InstanceSettings) -> None:
        self._settings = value

    def input_files(self) -> list[Path]:
        return self.files

    def required_inputs(self) -> list[str]:
        return [str(spec) for spec in self.files_spec]

    @property
    def input_key(self) -> dict:
        """What identifies the inputs in the cache keys: each file's sha256 and, for a compressed file,
        the format it is read as (plain files add nothing, so their caches keep their keys)."""
        formats = {str(p): fmt for p in self.files if (fmt := detect_format(p)) != "plain"}
        return {**self.data_checksums, "formats": formats} if formats else self.data_checksums

    def load_tokenizer(self) -> Tokenizer:
        """Loads ``vocab_file`` or the cached vocabulary trained on this corpus (training it once)."""
        spec = self.tokenizer_spec
        if spec.vocab_file:
            tokenizer = load_vocab_file(spec.vocab_file, spec.lowercase, spec.strip_accents)
            if tokenizer_kind(tokenizer) != spec.kind:
                raise VocabularyError(f"data.tokenizer.vocab_file={spec.vocab_file} is a {tokenizer_kind(tokenizer)} "
                                      f"tokenizer but data.tokenizer.kind={spec.kind} (a byte_bpe is a tokenizer.json)")
            return tokenizer
        directory = atomic_directory(self.tokenizer_dir, self._train_tokenizer)
        return Tokenizer.from_file(str(directory / "tokenizer.json"))

    @property
    def tokenizer_dir(self) -> Path:
        """Where the vocabulary trained on this corpus is cached (tokenizer.json, and vocab.txt for WordPiece)."""
        key = config_key(self.input_key, self.tokenizer_spec.cache_fields, self.settings.encoding_fallback)
        return self.cache_dir / "tokenizers" / key

    def _train_tokenizer(self, directory: Path) -> None:
        spec = self.tokenizer_spec
        log.info("training a %s vocabulary of %d on %d files", spec.kind, spec.vocab_size, len(self.files))
        # decoded text, a document at a time (files are decompressed and decoded as for the cache); the
        # vocabulary depends on the words only, so documents split by the configured boundary are shorter
        # strings and the same vocabulary
        s = self.settings
        sentences = (" ".join(doc) for doc in iter_documents(self.files, s.encoding_fallback, s.doc_boundary,
                                                             s.document_regex, s.line_is_sentence,
                                                             boundaries=s.file_boundaries))
        if spec.kind == "byte_bpe":
            tokenizer = train_byte_bpe(sentences, spec.vocab_size, spec.min_frequency, spec.lowercase)
        else:
            tokenizer = train_wordpiece(sentences, spec.vocab_size, spec.min_frequency, spec.limit_alphabet,
                                        spec.lowercase, spec.strip_accents)
        save_vocab(tokenizer, directory)

    @property
    def corpus_dir(self) -> Path:
        vocab_hash = config_key(vocab_list(self.tokenizer), self.lowercase)
        kind = tokenizer_kind(self.tokenizer)
        if kind != "wordpiece":  # the kind, and the whole tokenizer (a BPE's merges decide its tokens too)
            vocab_hash = config_key(vocab_hash, kind, tokenizer_json(self.tokenizer))
        settings = dict(self.settings.__dict__)
        for name in ("file_boundaries", "layout"):  # absent from the keys of caches built before they existed
            if settings[name] is None:
                del settings[name]
        if not settings["nsp"] and "layout" not in settings:
            # full-sentence instances once spanned the other split's documents between two of theirs:
            # caches built then are not reused
            settings["full_sentences"] = "adjacent_documents"
        key = config_key(self.input_key, vocab_hash, settings)
        return self.cache_dir / "corpus" / key

    def prepare_data(self) -> None:
        """Runs on one process per node before the others set up (Lightning's contract)."""
        super().prepare_data()
        atomic_directory(self.corpus_dir,
                         lambda d: build_corpus_cache(self.files, self.tokenizer, d, self.settings, self.data_checksums))

    @property
    def data_report(self) -> dict | None:
        """The corpus cache's report (JSON): files by format, documents, tokens, tokens dropped by
        truncation, files decoded with the encoding fallback and their replaced bytes, tokens per
        second of the build (see :mod:`bert_exp.data.corpus`); None before the cache exists."""
        try:
            meta = json.loads((self.corpus_dir / "meta.json").read_text())
        except FileNotFoundError:
            return None
        return {**meta.get("report", {}), "cache": str(self.corpus_dir)}

    def setup(self, stage: str | None = None) -> None:
        directory = self.corpus_dir
        if not (directory / "meta.json").exists():  # e.g. setup() without Lightning calling prepare_data()
            self.prepare_data()
        special = self.special_ids
        static = self.masking.static
        # static masks follow the corpus seed (as the original's data creation does); dynamic ones the run's
        mask_seed = self.settings.seed if static else self.order_seed
        self.datasets = {
            split: PretrainingDataset(directory, split, special.cls, special.sep, mask_seed, static)
            for split in ("train", "val")
        }
        pad_to = self.settings.max_seq_length if self.loader.pad_to_max_length else None
        if self.objective == "clm":  # every next token is predicted: nothing is masked
            self.collator = CausalLMCollator(special, pad_to=pad_to)
            return
        m = self.masking
        continuation = None
        if m.whole_word:
            byte_level = tokenizer_kind(self.tokenizer) != "wordpiece"
            continuation = continuation_table(self.tokenizer.get_vocab(), byte_level=byte_level)
        self.collator = PretrainingCollator(
            special, m.masked_lm_prob, m.max_predictions_per_seq, pad_to=pad_to, static=static,
            count_special_tokens=m.count_special_tokens, continuation=continuation,
        )

    # -- loaders -------------------------------------------------------------------------------

    def _loader(self, split: str, sampler) -> torch.utils.data.DataLoader:
        return self.dataloader(self.datasets[split], self.batch_size, sampler, self.collator)

    def train_dataloader(self):
        # epoch-tagged indices: the dataset varies dynamic masks per epoch without any shared state
        return self._loader("train", self.training_sampler(len(self.datasets["train"]), self.order_seed,
                                                           tag_epoch=True, drop_last=True))

    def val_dataloader(self):
        return self._loader("val", self.evaluation_sampler(self.datasets["val"]))
