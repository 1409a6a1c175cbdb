"""The pre-training LightningDataModule: a text corpus read, tokenized, prepared once and streamed (MLM, NSP
and the other objectives' batches)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from litdata import StreamingDataLoader
from tokenizers import Tokenizer

from ...errors import UserError
from ..base import VocabularyDataModule, blocking_signals, worker_init
from ..hashing import config_key, file_version, files_sha256, read_recorded, record_sha256
from ..loading import LoaderSettings
from ..sampling import process_group
from ..tokenizer import (
    KINDS,
    VocabularyError,
    atomic_directory,
    load_vocab_file,
    save_vocab,
    tokenizer_from_json,
    tokenizer_json,
    tokenizer_kind,
    train_byte_bpe,
    train_wordpiece,
    vocab_list,
)
from ..workers import track
from .files import CorpusError, expand_inputs
from .groups import InstanceSettings, instance_layout
from .integrity import DownloadedChunks, ItemRules, check_chunks, read_meta, verify_checksums
from .keys import check_unchanged, input_key, instance_key
from .masking import CausalLMCollator, MaskingSettings, PretrainingCollator, continuation_table
from .preparation import FORMAT, PrepareSettings, finish, plan_groups, prepare
from .sources import DatasetSource, is_remote, stage_inputs
from .storage import Location
from .streaming import PreparedInstances, StreamedInstances
from .tables import DEFAULT_COLUMN, table_format, table_has_rows
from .text import column_of, corpus_text_bytes, iter_text_chunks, sample_text_chunks

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
    # a corpus of more text than this trains the vocabulary on a sample of this size, drawn from every
    # file (bert_exp.data.corpus.text.sample_text_chunks); null: always the whole corpus
    sample_bytes: int | str | None = "1GB"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise VocabularyError(f"data.tokenizer.kind={self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.kind != "wordpiece" and self.strip_accents:
            raise VocabularyError("data.tokenizer.strip_accents=true: WordPiece only (byte_bpe keeps every character)")
        if self.lowercase is None:
            self.lowercase = self.kind == "wordpiece"
        if self.sample_bytes is not None:
            from .preparation import parse_bytes

            try:
                if parse_bytes(self.sample_bytes) <= 0:
                    raise ValueError
            except ValueError:
                raise VocabularyError(f"data.tokenizer.sample_bytes={self.sample_bytes!r}: a size such as 1GB, "
                                      "or null for the whole corpus") from None

    @property
    def cache_fields(self) -> dict:
        """What keys the trained vocabulary's cache: every field (a WordPiece leaves ``kind`` out, the key
        of the vocabularies trained before there were kinds)."""
        fields = dict(self.__dict__)
        del fields["sample_bytes"]  # in the key only where a sample is drawn (PretrainingDataModule.tokenizer_dir)
        if self.kind == "wordpiece":
            del fields["kind"]
            fields["training"] = "pinned_ids"  # deterministic since; earlier vocabularies are not reused
        return fields


INPUT_KEYS = {"path", "doc_boundary", "document_regex", "text_column"}


def _parse_input(item) -> tuple[str | DatasetSource, dict]:
    """A ``data.files`` entry: a path, directory, glob or s3:// URL, or a mapping ``{path, doc_boundary,
    document_regex, text_column}`` giving those files their own document boundary (a mixture of corpora)
    or text column (table files), or a ``datasets`` corpus ``{dataset, name, split, text_column}``
    (:mod:`bert_exp.data.corpus.sources`)."""
    if isinstance(item, Mapping) and "dataset" in item:
        return DatasetSource.from_entry(dict(item)), {}
    if isinstance(item, Mapping):
        item = dict(item)
        unknown = set(item) - INPUT_KEYS
        if unknown or "path" not in item:
            raise CorpusError(f"data.files entry {item}: expected a path, or a mapping with 'path' and optionally "
                              f"'doc_boundary', 'document_regex', 'text_column' (unknown: {sorted(unknown) or 'none'})")
        options = {k: item[k] for k in ("doc_boundary", "document_regex", "text_column") if k in item}
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
        prepare: PrepareSettings = PrepareSettings(),
    ):
        """``instances``: what the prepared instances are (their ``nsp`` and ``layout`` follow from
        ``objective``, ``packing`` and ``nsp``, whatever they hold); ``order_seed``: the training order
        and the dynamic masks (the run seed); ``prepare``: how and where the instances are prepared
        (:mod:`bert_exp.data.corpus.preparation`)."""
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
        self.prepare_settings = prepare
        self.checksum_memo = self.cache_dir  # the inputs are hashed once per file version (bert_exp.data.hashing)
        # every node's first process prepares: all of it into the node's own directory, or its share of the
        # groups where the nodes share the place (bert_exp.data.corpus.preparation)
        self.prepare_data_per_node = True
        wanted = round(masking.masked_lm_prob * (instances.max_seq_length - 2))  # 76 at 512, as BERT base sets
        if self.objective != "clm" and wanted > masking.max_predictions_per_seq:
            log.warning("data.masking.max_predictions_per_seq=%d caps the masked share of a full sequence of %d "
                        "tokens at %.1f %% (data.masking.masked_lm_prob=%g asks for about %d): raise it to mask as "
                        "asked", masking.max_predictions_per_seq, instances.max_seq_length,
                        100 * masking.max_predictions_per_seq / (instances.max_seq_length - 2),
                        masking.masked_lm_prob, wanted)
        self._files: list[Path] | None = None
        self._file_sha256: list[str] | None = None  # in the order of self.files
        self._versions: dict[str, list] | None = None  # each input's file_version when it was hashed
        self.datasets: dict = {}
        self.meta: dict | None = None

    # -- inputs, tokenizer, cache ---------------------------------------------------------------

    @property
    def files(self) -> list[Path]:
        if self._files is None:
            files, boundaries, columns = [], {}, {}
            for path, options in self.inputs:
                for file in expand_inputs(stage_inputs(path, self.cache_dir)):
                    new = file not in files
                    if new and ({"doc_boundary", "document_regex"} & set(options)) and str(file) not in boundaries:
                        boundaries[str(file)] = [options.get("doc_boundary", self._settings.doc_boundary),
                                                 options.get("document_regex", self._settings.document_regex)]
                    if new and options.get("text_column", DEFAULT_COLUMN) != DEFAULT_COLUMN:
                        columns[str(file)] = options["text_column"]
                    files.append(file)
            self._files = list(dict.fromkeys(files))
            if boundaries:
                self._settings = dataclasses.replace(self._settings, file_boundaries=boundaries)
            if columns:
                self._settings = dataclasses.replace(self._settings, text_columns=columns)
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
        """The local inputs (s3:// and datasets corpora are checked as they are staged)."""
        return [str(spec) for spec in self.files_spec if not is_remote(spec)]

    @property
    def data_checksums(self) -> dict[str, str]:
        self.input_versions  # noqa: B018 - before hashing: a file that changes from then on is noticed
        return super().data_checksums

    @property
    def input_versions(self) -> dict[str, list]:
        """Each input file's version (:func:`..hashing.file_version`) as it was hashed (or, where the run's
        first process hashed it, as this process first saw it): what is read must still be it."""
        if self._versions is None:
            self._versions = {str(p): file_version(p) for p in self.files}
        return self._versions

    @property
    def file_sha256(self) -> list[str]:
        """Each input file's sha256, in the order the files are read: hashed here, or handed over by the run's
        first process (by position: its paths are not this node's, which stages or mounts the inputs where
        it will)."""
        if self._file_sha256 is None:
            checksums = self.data_checksums
            self._file_sha256 = [checksums[str(p)] for p in self.files]
        self.input_versions  # noqa: B018 - handed the sha256: the files as this process first sees them
        if len(self._file_sha256) != len(self.files):
            raise CorpusError(f"data.files: this node reads {len(self.files)} input files, the run's first process "
                              f"{len(self._file_sha256)}: give every node the same inputs")
        return self._file_sha256

    def input_key(self, vocabulary: bool = False) -> list[dict]:
        """What identifies the inputs in the cache keys: each file's content and own options, in the order
        read (:func:`.keys.input_key`); never its path."""
        return input_key(self.files, self.file_sha256, self.settings, vocabulary)

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
        return self._cached_tokenizer(directory)

    @staticmethod
    def _cached_tokenizer(directory: Path) -> Tokenizer:
        """The vocabulary cached in ``directory``, its files checked against the sha256 recorded when they
        were written, as prepared chunks are: a cut or edited one is one line naming it. Not trained again
        in its place: another run sharing the cache may be reading it, and a damaged cache is worth knowing of."""
        try:
            contents = read_recorded(directory)
        except ValueError as err:
            raise VocabularyError(f"{err} (the cached vocabulary is damaged: delete {directory} to train it "
                                  "again)") from None
        if "tokenizer.json" not in contents:
            raise VocabularyError(f"{directory}: holds no tokenizer.json (delete it to train the vocabulary again)")
        return tokenizer_from_json(contents["tokenizer.json"].decode("utf-8"), str(directory / "tokenizer.json"))

    @property
    def tokenizer_dir(self) -> Path:
        """Where the vocabulary trained on this corpus is cached (tokenizer.json, and vocab.txt for WordPiece)."""
        sample = self.vocabulary_sample_bytes
        extra = [{"sample_bytes": sample}] if sample else []  # a whole corpus: no sample size in its key
        key = config_key(self.input_key(vocabulary=True), self.tokenizer_spec.cache_fields,
                         self.settings.encoding_fallback, *extra)
        return self.cache_dir / "tokenizers" / key

    @property
    def vocabulary_sample_bytes(self) -> int | None:
        """How much text the vocabulary is trained on, where the corpus is larger; None: all of it."""
        limit = self.tokenizer_spec.sample_bytes
        if limit is None:
            return None
        from .preparation import parse_bytes

        limit = parse_bytes(limit)
        return limit if corpus_text_bytes(self.files) > limit else None

    def _train_tokenizer(self, directory: Path) -> None:
        spec = self.tokenizer_spec
        sample = self.vocabulary_sample_bytes
        log.info("training a %s vocabulary of %d on %d files%s", spec.kind, spec.vocab_size, len(self.files),
                 f" (a sample of {sample / 2**20:.0f} MB of their {corpus_text_bytes(self.files) / 2**20:.0f} MB)"
                 if sample else "")
        # the files' lines, decompressed and decoded as for the cache: a vocabulary depends on the words only
        if sample:
            texts = functools.partial(sample_text_chunks, self.files, sample, self.settings.encoding_fallback,
                                      columns=self.settings.text_columns)
        else:
            texts = functools.partial(iter_text_chunks, self.files, self.settings.encoding_fallback,
                                      columns=self.settings.text_columns)
        if spec.kind == "byte_bpe":
            tokenizer = train_byte_bpe(texts(), spec.vocab_size, spec.min_frequency, spec.lowercase)
        else:
            tokenizer = train_wordpiece(texts, spec.vocab_size, spec.min_frequency, spec.limit_alphabet,
                                        spec.lowercase, spec.strip_accents)
        check_unchanged(self.input_versions, self.files)  # what was read is what the key holds
        save_vocab(tokenizer, directory)
        record_sha256(directory)  # checked whenever the cache is used (_cached_tokenizer)

    @property
    def prepared_root(self) -> Location:
        """Where prepared datasets are kept: ``data.prepare.dir``, else ``$BERT_EXP_CACHE/prepared``."""
        return Location(self.prepare_settings.dir or str(self.cache_dir / "prepared"))

    @property
    def prepared_key(self) -> dict:
        """What the prepared instances depend on: the inputs' contents, the vocabulary (a byte-level BPE's
        merges too), every instance setting, the size of the groups NotNext segments come from, the format."""
        vocab_hash = config_key(vocab_list(self.tokenizer), self.lowercase)
        kind = tokenizer_kind(self.tokenizer)
        if kind != "wordpiece":
            vocab_hash = config_key(vocab_hash, kind, tokenizer_json(self.tokenizer))
        key = {"inputs": self.input_key(), "vocabulary": vocab_hash, "instances": instance_key(self.settings),
               "group_bytes": self.prepare_settings.group_bytes, "format": FORMAT,
               "chunk_bytes": self.prepare_settings.chunk_size(self.prepared_root)}
        checked = [p for p in self.prepare_settings.evaluation_sets or [] if Path(p).is_file()]
        if checked:  # the report says what the corpus shares with these (their content, wherever they lie)
            key["evaluation_sets"] = sorted(files_sha256([Path(p) for p in checked]).values())
        return key

    @property
    def prepared_location(self) -> Location:
        return self.prepared_root.child(config_key(self.prepared_key))

    @property
    def vocabulary_sha256(self) -> str:
        return hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()

    def check_corpus(self) -> None:
        """Before any work (hashing the inputs, the vocabulary, the instances): every table file has its text
        column, and the inputs are not all empty, so such a mistake is the same one line whatever the cache
        holds (a cached vocabulary used to let it through to the preparation)."""
        empty = []
        for file in self.files:
            fmt = table_format(file)
            if fmt:
                if not table_has_rows(file, column_of(file, self.settings.text_columns), fmt):
                    empty.append(f"{file}: holds 0 rows")
            elif file.stat().st_size == 0:
                empty.append(f"{file}: is empty")
        if empty and len(empty) == len(self.files):
            others = f" (the other {len(empty) - 1} input files are empty too)" if len(empty) > 1 else ""
            raise CorpusError(f"{empty[0]}{others}; there is no text to pre-train on")

    def check_storage(self) -> None:
        """Before any work (the vocabulary included): the place the prepared data goes can be used."""
        self.prepared_root.check_reachable()

    def _meta_to_record(self) -> dict:
        inputs = {str(path): digest for path, digest in zip(self.files, self.file_sha256)}  # this node's paths
        return {"inputs": inputs, "settings": self.settings.__dict__,
                "group_bytes": self.prepare_settings.group_bytes, "vocabulary_sha256": self.vocabulary_sha256}

    def _node(self) -> tuple[int, int]:
        """(this node, the nodes) among which a shared place's preparation is dealt out."""
        if self.trainer is None or not self.prepare_settings.shared(self.prepared_root):
            return 0, 1
        return self.trainer.node_rank, self.trainer.num_nodes

    def prepare_data(self) -> None:
        """On every node's first process (Lightning's contract): prepares the instances unless they are
        (:mod:`bert_exp.data.corpus.preparation`): all of them into this node's directory, or this node's share
        of the groups into a place the nodes share."""
        super().prepare_data()
        self.check_storage()
        self.check_corpus()
        node_rank, num_nodes = self._node()
        prepare(self.prepared_location, self.files, self.tokenizer.to_str(), self.vocab_size, self.settings,
                self.prepare_settings, self._meta_to_record(), node_rank, num_nodes, self.input_versions)

    def _finish_shared(self) -> None:
        """Where the nodes shared the preparation, the run's first process writes the indexes and meta.json
        once every node has prepared its share (Lightning waits for every node's prepare_data); the
        others wait for it."""
        trainer = self.trainer
        if trainer is None or self._node()[1] == 1:
            return
        if trainer.is_global_zero and read_meta(self.prepared_location) is None:
            groups = plan_groups(self.files, self.prepare_settings.group_bytes)
            finish(self.prepared_location, self.files, len(groups), self.settings, self._meta_to_record(),
                   self.prepare_settings.overlap())
        trainer.strategy.barrier("bert_exp_prepared")

    @property
    def data_report(self) -> dict | None:
        """The prepared data's report (JSON): files by format, documents, tokens, tokens dropped by
        truncation, files decoded with the encoding fallback and their replaced bytes, tokens per
        second of the preparation (see :mod:`bert_exp.data.corpus.groups`); None before it is prepared."""
        meta = self.meta or read_meta(self.prepared_location)
        if meta is None:
            return None
        return {**meta.get("report", {}), "prepared": str(self.prepared_location), "splits": meta.get("splits"),
                "identity": meta.get("identity"), "vocabulary_sample_bytes": self.vocabulary_sample_bytes}

    def setup(self, stage: str | None = None) -> None:
        location = self.prepared_location
        self._finish_shared()
        meta = read_meta(location)
        if meta is None and (self.trainer is None or self.trainer.world_size == 1):
            self.prepare_data()  # e.g. setup() without Lightning calling prepare_data()
            meta = read_meta(location)
        if meta is None:
            raise UserError(f"{location}: the prepared data is incomplete (its preparation did not finish)")
        check_chunks(location)
        if self.trainer is None or self.trainer.local_rank == 0:  # one process a node reads the chunks
            verify_checksums(location, meta, self.cache_dir)
        self.meta = meta
        self._check_ranks_agree(location)
        special = self.special_ids
        static = self.masking.static
        # static masks follow the corpus seed (as the original's data creation does); dynamic ones the run's
        self.mask_seed = self.settings.seed if static else self.order_seed
        cache = str(self.cache_dir / "stream") if location.remote else None
        # by index, for a look at what was prepared (training streams train/: train_dataloader)
        self.datasets = {split: PreparedInstances(location.join(split), self.mask_seed,
                                                  meta["splits"][split]["instances"], cache, **self._item_checks(split))
                         for split in ("train", "val")}
        pad_to = self.settings.max_seq_length if self.loader.pad_to_max_length else None
        multiple = self.loader.pad_to_multiple_of
        if self.objective == "clm":  # every next token is predicted: nothing is masked
            self.collator = CausalLMCollator(special, pad_to=pad_to, pad_multiple=multiple)
            return
        continuation = None
        if self.masking.by_words:
            byte_level = tokenizer_kind(self.tokenizer) != "wordpiece"
            continuation = continuation_table(self.tokenizer.get_vocab(), byte_level=byte_level)
        self.collator = PretrainingCollator(special, self.masking, continuation, pad_to=pad_to, pad_multiple=multiple)

    def _item_checks(self, split: str) -> dict:
        """How each item read of ``split`` is checked: every field against what preparation writes, and an
        object store's chunks against their sha256 once downloaded (:mod:`bert_exp.data.corpus.integrity`)."""
        rules = ItemRules(self.vocab_size, self.settings.max_seq_length, self.settings.nsp, self.special_ids.cls,
                          self.special_ids.sep)
        location = self.prepared_location
        downloads = DownloadedChunks(location.url, split, self.meta, self.cache_dir) if location.remote else None
        return {"rules": rules, "downloads": downloads}

    def _check_ranks_agree(self, location: Location) -> None:
        """Before the first step: every rank's vocabulary and prepared data are rank 0's, by content (the
        dataset's identity: inputs, vocabulary, settings, chunks and their checksums; not when or with how
        many workers it was made). A rank that differs (another vocabulary, other inputs or settings, a
        stale or damaged node-local copy) stops the run on every rank, with one line naming the ranks."""
        world, rank = process_group(self.trainer)
        if world == 1:
            return
        digests = [self.vocabulary_sha256, self.meta["identity"]]
        mine = torch.tensor([int(d[:15], 16) for d in digests], dtype=torch.int64,
                            device=self.trainer.strategy.root_device)
        gathered = self.trainer.strategy.all_gather(mine).reshape(world, 2).cpu()
        problems = []
        for column, what in enumerate(("vocabulary", "prepared data")):
            differ = [r for r in range(world) if gathered[r, column] != gathered[0, column]]
            if differ:
                problems.append(f"rank(s) {', '.join(map(str, differ))} have another {what} than rank 0")
        if problems:
            raise UserError("the ranks of this run disagree: " + "; ".join(problems) + f" (this is rank {rank}; "
                            f"its prepared data: {location}). Give every node the same inputs and settings.")

    # -- what the other processes of a run receive from the first ---------------------------------------

    def shared_state(self) -> dict:
        """What the run's first process works out once for all (the vocabulary trained on the corpus, the
        inputs' sha256), for the others to :meth:`use_shared_state` instead of working it out again. The
        sha256 go by position too: another node's paths to the same inputs are its own."""
        return {"tokenizer": self.tokenizer.to_str(), "lowercase": self.lowercase, "checksums": self.data_checksums,
                "file_sha256": self.file_sha256}

    def use_shared_state(self, state: dict) -> None:
        self._tokenizer = tokenizer_from_json(state["tokenizer"], "the first process's vocabulary")
        self.lowercase = state["lowercase"]
        self._checksums = dict(state["checksums"])
        self._file_sha256 = list(state["file_sha256"])

    # -- loaders ----------------------------------------------------------------------------------------

    def train_dataloader(self):
        dataset = StreamedInstances(self.prepared_location.join("train"), self.mask_seed, self.masking.static,
                                     shuffle_seed=self.order_seed,
                                     cache_dir=str(self.cache_dir / "stream") if self.prepared_location.remote else None,
                                     **self._item_checks("train"))
        loader = streaming_loader(dataset, self.batch_size, self.collator, self.loader.num_workers,
                                  self.loader.pin_memory)
        self._train_loader = loader
        if self._resume_state:
            resume_streaming(loader, dataset, **self._resume_state)
            self._resume_state = None
        return loader

    def val_dataloader(self):
        return self.dataloader(self.datasets["val"], self.batch_size, self.evaluation_sampler(self.datasets["val"]),
                               self.collator)

    def state_dict(self) -> dict:
        """Saved in every checkpoint: the epoch of the stream (litdata counts from 1), the batches of it
        this rank has trained on, and what a resume needs to find the same place: the prepared data's
        identity and the number of processes and loader workers its chunks were shared out among."""
        loader = getattr(self, "_train_loader", None)
        if loader is None or self.trainer is None:
            return {}
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.processed
        world, _ = process_group(self.trainer)
        return {"epoch": loader.current_epoch, "batches_done": done, "stream": True, "world_size": world,
                "num_workers": loader.num_workers, "prepared_identity": (self.meta or {}).get("identity")}

    def load_state_dict(self, state: dict) -> None:
        """A resume continues exactly where the checkpoint stands, or stops with one line: on other
        prepared data, or part-way into an epoch with another number of processes or loader workers (the
        stream deals its chunks out by both, so the rest of the epoch would repeat or skip instances)."""
        if state and not state.get("stream"):
            raise UserError("the checkpoint holds a position in the corpus cache of an earlier version of "
                            "bert_exp, which streams prepared data now: resume it with that version, or start "
                            "from its weights (task.init_from=...)")
        self._resume_state = {k: state[k] for k in ("epoch", "batches_done")} if state else None
        if not state or self.trainer is None:
            return
        recorded, current = state.get("prepared_identity"), (self.meta or {}).get("identity")
        if recorded and current and recorded != current:
            raise UserError(f"the checkpoint was trained on other prepared data (identity {recorded[:12]}) than "
                            f"{self.prepared_location} ({current[:12]}): resume with the inputs and data settings "
                            "it was trained with, or start from its weights (task.init_from=...)")
        world = process_group(self.trainer)[0]
        layout, saved = (world, self.loader.num_workers), (state.get("world_size"), state.get("num_workers"))
        if state.get("batches_done") and layout != saved:
            raise UserError(f"the checkpoint stopped {state['batches_done']} batches into an epoch with {saved[0]} "
                            f"process(es) and data.loader.num_workers={saved[1]}; this run has {layout[0]} and "
                            f"{layout[1]}: the stream deals its chunks out by both, so the rest of the epoch would "
                            "repeat or skip instances. Resume with the checkpoint's number of processes "
                            "(trainer.num_nodes x trainer.devices) and loader workers.")


class StreamingLoader(StreamingDataLoader):
    """litdata's StreamingDataLoader (it shares the chunks out among its workers and tells the dataset the
    epoch), its workers started and ended as ours are (:func:`bert_exp.data.base.blocking_signals`,
    ``worker_init``, :func:`bert_exp.data.workers.track`)."""

    # Lightning keeps the state of a loader that has one, taken with the batch it fetches ahead (one past
    # the last trained on); the DataModule keeps the position instead, so none is shown to Lightning
    state_dict = None
    load_state_dict = None

    def _get_iterator(self):
        with blocking_signals(self.num_workers > 0):
            return track(super()._get_iterator())

    def __iter__(self):
        # litdata clears a restored position when the restored epoch's iteration runs to its end; Lightning
        # stops at the epoch's last batch without asking for one more, so the next epoch would start from
        # the restored position again: it is used once, by the first iteration
        for number, batch in enumerate(super().__iter__()):
            if number == 0:
                self.restore = False
            yield batch


def streaming_loader(dataset, batch_size: int, collator, num_workers: int, pin_memory: bool) -> StreamingLoader:
    return StreamingLoader(dataset, batch_size=batch_size, collate_fn=collator, num_workers=num_workers,
                           pin_memory=pin_memory, drop_last=True, worker_init_fn=worker_init)


def resume_streaming(loader: StreamingLoader, dataset, epoch: int, batches_done: int) -> None:
    """Puts a fresh loader where an interrupted run's was: ``batches_done`` batches into ``epoch``.
    litdata replays its deterministic assignment of chunks to workers and skips what was read."""
    if batches_done == 0:
        loader.current_epoch = epoch - 1  # the next iteration starts this epoch afresh
        return
    samples = batches_done * loader.batch_size
    state = dataset.state_dict(samples, loader.num_workers, loader.batch_size)
    state["current_epoch"] = epoch
    StreamingDataLoader.load_state_dict(loader, {"dataset": state, "current_epoch": epoch, "num_samples_yielded": samples,
                                                 "latest_worker_idx": (batches_done - 1) % max(loader.num_workers, 1)})
