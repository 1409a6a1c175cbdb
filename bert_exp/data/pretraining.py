"""LightningDataModule for MLM(+NSP) pre-training on a text corpus."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from .base import DataLoader, VocabularyDataModule, worker_init
from .corpus import InstanceSettings, PretrainingDataset, build_corpus_cache
from .hashing import config_key
from .masking import PretrainingCollator
from .text import expand_inputs, iter_documents
from .tokenizer import (
    atomic_directory,
    load_vocab_file,
    save_vocab,
    train_wordpiece,
    vocab_list,
)

log = logging.getLogger(__name__)


@dataclass
class TokenizerSpec:
    """Either ``vocab_file`` (load it) or the settings to train a WordPiece vocabulary on the corpus."""

    vocab_file: str | None = None
    vocab_size: int = 30522
    min_frequency: int = 2
    limit_alphabet: int = 1000
    lowercase: bool = True
    strip_accents: bool | None = None  # None: strip when lower-casing, as BERT's uncased models do


class PretrainingDataModule(VocabularyDataModule):
    def __init__(
        self,
        files: list[str],
        tokenizer: TokenizerSpec,
        cache_dir: str,
        max_seq_length: int = 128,
        max_predictions_per_seq: int = 20,
        masked_lm_prob: float = 0.15,
        short_seq_prob: float = 0.1,
        short_seq_per_document: bool = False,
        nsp: bool = True,
        masking: str = "dynamic",
        dupe_factor: int = 1,
        val_fraction: float = 0.02,
        min_val_documents: int = 2,
        encoding_fallback: str | None = "latin-1",
        doc_boundary: str = "file",
        document_regex: str | None = None,
        line_is_sentence: bool = False,
        pad_to_max_length: bool = False,
        batch_size: int = 32,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 12345,
        order_seed: int = 0,
        download: bool = True,
    ):
        super().__init__(tokenizer.vocab_file, tokenizer.lowercase, download)
        if masking not in ("dynamic", "static"):
            raise ValueError(f"data.masking={masking!r}: expected dynamic or static")
        self.files_spec = list(files)
        self.tokenizer_spec = tokenizer
        self.cache_dir = Path(cache_dir).expanduser()
        self.settings = InstanceSettings(
            max_seq_length=max_seq_length, short_seq_prob=short_seq_prob,
            short_seq_per_document=short_seq_per_document, nsp=nsp, dupe_factor=dupe_factor,
            val_fraction=val_fraction, min_val_documents=min_val_documents,
            encoding_fallback=encoding_fallback, doc_boundary=doc_boundary, document_regex=document_regex,
            line_is_sentence=line_is_sentence, seed=seed,
        )
        self.max_predictions_per_seq = max_predictions_per_seq
        self.masked_lm_prob = masked_lm_prob
        self.masking = masking
        self.pad_to_max_length = pad_to_max_length
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.order_seed = order_seed
        self._files: list[Path] | None = None
        self.datasets: dict[str, PretrainingDataset] = {}

    # -- inputs, tokenizer, cache ---------------------------------------------------------------

    @property
    def files(self) -> list[Path]:
        if self._files is None:
            self._files = expand_inputs(self.files_spec)
        return self._files

    def input_files(self) -> list[Path]:
        return self.files

    def required_inputs(self) -> list[str]:
        return [str(spec) for spec in self.files_spec]

    def load_tokenizer(self) -> Tokenizer:
        """Loads ``vocab_file`` or the cached vocabulary trained on this corpus (training it once)."""
        spec = self.tokenizer_spec
        if spec.vocab_file:
            return load_vocab_file(spec.vocab_file, spec.lowercase, spec.strip_accents)
        key = config_key(self.data_checksums, spec.__dict__, self.settings.encoding_fallback)
        directory = atomic_directory(self.cache_dir / "tokenizers" / key, self._train_tokenizer)
        return Tokenizer.from_file(str(directory / "tokenizer.json"))

    def _train_tokenizer(self, directory: Path) -> None:
        spec = self.tokenizer_spec
        log.info("training a WordPiece vocabulary of %d on %d files", spec.vocab_size, len(self.files))
        sentences = (" ".join(doc) for doc in iter_documents(self.files, self.settings.encoding_fallback))
        tokenizer = train_wordpiece(sentences, spec.vocab_size, spec.min_frequency, spec.limit_alphabet,
                                    spec.lowercase, spec.strip_accents)
        save_vocab(tokenizer, directory)

    @property
    def corpus_dir(self) -> Path:
        vocab_hash = config_key(vocab_list(self.tokenizer), self.lowercase)
        key = config_key(self.data_checksums, vocab_hash, self.settings.__dict__)
        return self.cache_dir / "corpus" / key

    def prepare_data(self) -> None:
        """Runs on one process per node before the others set up (Lightning's contract)."""
        super().prepare_data()
        atomic_directory(self.corpus_dir,
                         lambda d: build_corpus_cache(self.files, self.tokenizer, d, self.settings, self.data_checksums))

    def setup(self, stage: str | None = None) -> None:
        directory = self.corpus_dir
        if not (directory / "meta.json").exists():  # e.g. setup() without Lightning calling prepare_data()
            self.prepare_data()
        special = self.special_ids
        static = self.masking == "static"
        # static masks follow the corpus seed (as the original's data creation does); dynamic ones the run's
        mask_seed = self.settings.seed if static else self.order_seed
        self.datasets = {
            split: PretrainingDataset(directory, split, special.cls, special.sep, mask_seed, static)
            for split in ("train", "val")
        }
        self.collator = PretrainingCollator(
            special, self.masked_lm_prob, self.max_predictions_per_seq,
            pad_to=self.settings.max_seq_length if self.pad_to_max_length else None, static=static,
        )

    # -- loaders -------------------------------------------------------------------------------

    def _loader(self, split: str, sampler) -> torch.utils.data.DataLoader:
        return DataLoader(
            self.datasets[split], batch_size=self.batch_size, sampler=sampler, collate_fn=self.collator,
            num_workers=self.num_workers, pin_memory=self.pin_memory, persistent_workers=self.num_workers > 0,
            worker_init_fn=worker_init,
        )

    def train_dataloader(self):
        # epoch-tagged indices: the dataset varies dynamic masks per epoch without any shared state
        return self._loader("train", self.training_sampler(len(self.datasets["train"]), self.order_seed,
                                                           tag_epoch=True, drop_last=True))

    def val_dataloader(self):
        return self._loader("val", self.evaluation_sampler(self.datasets["val"]))
