"""What every DataModule shares: a BERT WordPiece tokenizer, its own or one handed over by the run
(the vocabulary of the checkpoint a task starts from)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from tokenizers import Tokenizer

from .hashing import files_sha256
from .loading import LoaderSettings, check_inputs
from .masking import SpecialIds
from .sampling import EvaluationSampler, TrainingSampler, process_group
from .tokenizer import load_vocab_file, save_vocab, tokenizer_from_vocab


class VocabularyDataModule(L.LightningDataModule):
    def __init__(self, vocab_file: str | None = None, lowercase: bool = True, download: bool = True,
                 loader: LoaderSettings = LoaderSettings()):
        super().__init__()
        self.loader = loader
        self.vocab_file = vocab_file
        self.lowercase = lowercase
        self.download = download
        self._tokenizer: Tokenizer | None = None
        self._train_sampler: TrainingSampler | None = None
        self._resume_state: dict | None = None

    @property
    def batch_size(self) -> int:
        """The per-device training batch (``data.loader.batch_size``, which the runner derives)."""
        return self.loader.batch_size

    def required_inputs(self) -> list[str]:
        """The configured input paths (or globs) that must exist before anything is read."""
        return [str(p) for p in self.input_files()]

    def prepare_data(self) -> None:
        # the runner fetched missing catalog data sets before (bert_exp.datasets); here they must exist
        check_inputs(self.required_inputs())

    def use_vocabulary(self, tokens: list[str], lowercase: bool = True) -> None:
        """Tokenize with this vocabulary (a checkpoint's) instead of the configured one."""
        self._tokenizer = tokenizer_from_vocab(tokens, lowercase)
        self.lowercase = lowercase

    def load_tokenizer(self) -> Tokenizer:
        if not self.vocab_file:
            raise ValueError("no vocabulary: set data.vocab_file or start from a checkpoint (task.init_from)")
        return load_vocab_file(self.vocab_file, self.lowercase)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = self.load_tokenizer()
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def special_ids(self) -> SpecialIds:
        t = self.tokenizer
        ids = {name: t.token_to_id(f"[{name.upper()}]") for name in ("pad", "cls", "sep", "mask")}
        return SpecialIds(**ids, vocab_size=t.get_vocab_size())

    def save_vocab(self, directory: str | Path) -> Path:
        return save_vocab(self.tokenizer, directory)

    def input_files(self) -> list[Path]:
        return []

    @property
    def data_checksums(self) -> dict[str, str]:
        """sha256 of every input file (recorded in run.json)."""
        if getattr(self, "_checksums", None) is None:
            self._checksums = files_sha256(self.input_files())
        return self._checksums

    # -- sharding and resuming -------------------------------------------------------------------

    def training_sampler(self, lengths, seed: int, **options) -> TrainingSampler:
        """This process's share of a seeded training order; a resumed run starts where it stopped."""
        world, rank = process_group(self.trainer)
        sampler = TrainingSampler(lengths, self.batch_size, seed=seed, world_size=world, rank=rank, **options)
        if self._resume_state:
            sampler.resume_at(self._resume_state["epoch"], self._resume_state["batches_done"])
            self._resume_state = None
        self._train_sampler = sampler
        return sampler

    def evaluation_sampler(self, dataset) -> EvaluationSampler:
        return EvaluationSampler(len(dataset), *process_group(self.trainer))

    def state_dict(self) -> dict:
        """Saved in every checkpoint: where in which epoch's order the training stands."""
        if self._train_sampler is None or self.trainer is None:
            return {}
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        return {"epoch": self._train_sampler.epoch, "batches_done": done}

    def load_state_dict(self, state: dict) -> None:
        self._resume_state = dict(state) or None
