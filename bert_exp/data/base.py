"""What every DataModule shares: a tokenizer (BERT's WordPiece or a byte-level BPE), its own or one
handed over by the run (the tokenizer of the checkpoint a task starts from)."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
from tokenizers import Tokenizer

from .hashing import files_sha256
from .loading import LoaderSettings, check_inputs
from .sampling import EvaluationSampler, TrainingSampler, process_group
from .tokenizer import SpecialIds, checkpoint_tokenizer, load_vocab_file, save_vocab
from .workers import track


STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def blocking_signals(block: bool = True):
    """SIGTERM and SIGINT held back while loader workers start: a signal to the process group arriving
    then waits, and each worker discards it once :func:`worker_init` has it ignoring them (otherwise a
    worker forked at that moment dies of it, and the run with it)."""
    if not block:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class DataLoader(torch.utils.data.DataLoader):
    """PyTorch's DataLoader, its workers started with the stop signals blocked (:func:`blocking_signals`)
    and ended at exit if still there (:func:`.workers.track`)."""

    def _get_iterator(self):
        with blocking_signals(self.num_workers > 0):
            return track(super()._get_iterator())


def worker_init(worker_id: int) -> None:
    """Every DataLoader worker of ours starts here. Workers ignore SIGTERM and SIGINT: a signal sent to
    the whole process group (a timeout, SLURM, Kubernetes, Ctrl-C in a terminal) is the main process's to
    act on; a worker dying of it would make PyTorch raise in the main process, in the middle of saving
    last.ckpt. The workers still end with the main process (PyTorch shuts them down, or they notice it
    gone; those a failure left running are ended at exit by :mod:`bert_exp.data.workers`, as SIGTERM
    cannot). Lightning's seeding of workers (``seed_everything(workers=True)``) is kept: Lightning adds it
    only to loaders without a ``worker_init_fn``, so it is called from here."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by DataLoader.__iter__ for the fork
    if int(os.environ.get("PL_SEED_WORKERS", "0")):
        from lightning.fabric.utilities.seed import pl_worker_init_function

        pl_worker_init_function(worker_id)


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

    def dataloader(self, dataset, batch_size: int, sampler, collate_fn) -> DataLoader:
        """A loader of ours as ``data.loader`` says (workers, pinned memory), its workers started by
        :func:`worker_init`."""
        workers = self.loader.num_workers
        return DataLoader(dataset, batch_size=batch_size, sampler=sampler, collate_fn=collate_fn, num_workers=workers,
                          pin_memory=self.loader.pin_memory, persistent_workers=workers > 0, worker_init_fn=worker_init)

    def required_inputs(self) -> list[str]:
        """The configured input paths (or globs) that must exist before anything is read."""
        return [str(p) for p in self.input_files()]

    def prepare_data(self) -> None:
        # the runner fetched missing catalog data sets before (bert_exp.datasets); here they must exist
        check_inputs(self.required_inputs())

    def use_vocabulary(self, tokens: list[str], lowercase: bool = True, serialized: str | None = None) -> None:
        """Tokenize with this vocabulary (a checkpoint's) instead of the configured one: WordPiece from its
        tokens, or the whole tokenizer it carries (``serialized``: its tokenizer.json, a byte-level BPE)."""
        self._tokenizer = checkpoint_tokenizer(tokens, lowercase, serialized)
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
            self._checksums = files_sha256(self.input_files(), getattr(self, "checksum_memo", None))
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


class TrainAndValSetsDataModule(VocabularyDataModule):
    """A DataModule of encoded examples in memory: ``datasets["train"]`` and one set per name in
    ``val_files``, batched by ``collate`` (GLUE TSV tasks, tagging)."""

    datasets: dict[str, list[dict]]
    val_files: dict[str, str]

    @property
    def val_names(self) -> list[str]:
        return list(self.val_files)

    def _loader(self, name: str, batch_size: int, sampler):
        return self.dataloader(self.datasets[name], batch_size, sampler, self.collate)

    def train_dataloader(self):
        lengths = [len(f["input_ids"]) for f in self.datasets["train"]]
        sampler = self.training_sampler(lengths, self.seed, group_by_length=self.loader.group_by_length)
        return self._loader("train", self.batch_size, sampler)

    def val_dataloader(self):
        return [self._loader(name, self.loader.eval_batch_size, self.evaluation_sampler(self.datasets[name]))
                for name in self.val_names]
