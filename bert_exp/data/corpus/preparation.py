"""Preparing pre-training data: a corpus's instances cut once, in Lightning's litdata chunk format, into a
local directory or an object store (:mod:`bert_exp.data.corpus.storage`).

**Groups.** The input files are dealt, in sorted order, into groups of about ``data.prepare.group_bytes``
of text (whole files; :func:`plan_groups`). A group is the unit of work and of layout: worker processes
(``data.prepare.num_workers``) each take a group and a split, read its documents, hold out validation
documents, tokenize, cut the instances (:func:`.groups.cut_group`: NotNext segments come from the same
group) and write them shuffled with litdata's ``BinaryWriter`` into chunks of the group's own
(``chunk-<group>-<n>.bin``), then a record of the group (``groups/<split>-<group>.json``: its chunks with
their sizes and sha256, and what reading it found). Each item is its token ids and ``[uid, where B
starts, label]``; the uid (group << 32 | the instance's number in its group) keys the instance's masks.

So the chunks depend on the inputs, the vocabulary and the settings alone, never on how many workers or
machines made them: copies prepared on two nodes are byte for byte the same, and two runs writing one
object-store prefix write the same objects (nothing is ever deleted there). litdata's ``optimize()`` lays
chunks out by worker (another worker count, another layout) and clears its output prefix first; the
index it would merge is written here from the groups' records.

**Who prepares.** Into a node's own directory (the default, ``$BERT_EXP_CACHE/prepared``) the node
prepares every group, in a directory beside the final one that is renamed into place when complete. Into
a place the nodes share (an ``s3://`` prefix, or a directory with ``data.prepare.across_nodes=true``) each
node prepares its share of the groups in place (a group already recorded there is skipped: an
interrupted preparation resumes), and the run's first process writes the indexes and ``meta.json``
(:func:`finish`). ``meta.json`` is written last: a dataset without it is incomplete.

**Faults.** Workers die with the process that started them (``PR_SET_PDEATHSIG``) and remove the
preparation's temporary directories as they go; where they were killed with it (SIGKILL to the process
group), the temporary directories are named after the host and process that made them, and the next
preparation removes those of this host's processes that are gone (:func:`remove_stale`). A full disk is one
line, checked before the work from the text's size (:data:`PREPARED_PER_TEXT_BYTE`) and again if it happens:
while the chunks are written (naming the directory), or an index, a group's record or meta.json (naming the
file; nothing half-written is kept).
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...orphans import die_with_parent
from ...records import temp_directory
from ..hashing import file_sha256
from .groups import GroupReport, InstanceSettings, assemble, cut_group, data_report, warn_about_losses
from .integrity import SPLITS, identity, read_meta
from .keys import check_unchanged
from .overlap import Overlap
from .storage import Location, PreparedDataError, is_disk_full
from .text import text_weight

log = logging.getLogger("bert_exp.data")

FORMAT = "litdata-instances-2"  # what an item holds and how chunks are laid out (part of the key)
# prepared bytes per byte of text, with 16-bit token ids: 0.64 measured on 2.4 GB of books, reviews and
# articles at max_seq_length 128 (docs/results/data_prep.md); 32-bit ids count double. Used only to refuse,
# before it starts, a preparation that cannot fit.
PREPARED_PER_TEXT_BYTE = 0.7
LOCAL_CHUNK_BYTES = "1MB"  # small chunks mix the corpus better when streamed from a local disk
OBJECT_STORE_CHUNK_BYTES = "32MB"  # fewer, larger requests to an object store (litdata's examples: tens of MB)
# where a preparation writes its chunks before moving them into place: in a local place, a directory in it
# (the same file system, so a rename); for an object store, one in the system's temporary directory
SCRATCH_PREFIX = ".scratch-"
OBJECT_STORE_SCRATCH_PREFIX = "bert_exp-prepare-"


def parse_bytes(value: int | str) -> int:
    """``32MB``, ``512KB``, ``1GB`` (powers of 1024) or a number of bytes."""
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().removesuffix("B")
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * factor)
    return int(text)


@dataclass(frozen=True)
class PrepareSettings:
    """How the instances are prepared and where they are kept (``data.prepare``). ``group_bytes`` (NotNext
    segments come from the same group) and the chunk size change what is stored: both are in the key."""

    dir: str | None = None  # a local directory or s3://bucket/prefix; None: $BERT_EXP_CACHE/prepared
    num_workers: int | None = None  # worker processes; None: one per CPU, at most one per group
    group_bytes: int | str = "32MB"  # text per group (a compressed file counts 4x its size)
    chunk_bytes: int | str | None = None  # per litdata chunk; None: 1MB in a directory, 32MB in an object store
    across_nodes: bool = False  # `dir` is shared by the nodes: each prepares its share of the groups there
    # evaluation sets (SQuAD JSON, or text files) that no pre-training document should share a paragraph
    # with: checked while preparing, named in the data report (those absent here are skipped)
    evaluation_sets: list[str] | None = None
    wait_minutes: float = 120  # the longest a process waits for another (the first process's vocabulary)

    def overlap(self) -> Overlap | None:
        present = [p for p in self.evaluation_sets or [] if Path(p).is_file()]
        return Overlap.of_files(present) if present else None

    def chunk_size(self, location: Location) -> int:
        return parse_bytes(self.chunk_bytes or (OBJECT_STORE_CHUNK_BYTES if location.remote else LOCAL_CHUNK_BYTES))

    def shared(self, location: Location) -> bool:
        """Whether the nodes share the place (an object store always is), and so share the work."""
        return location.remote or self.across_nodes

    def __post_init__(self):
        if self.evaluation_sets is not None:  # a plain list (the config gives a ListConfig)
            object.__setattr__(self, "evaluation_sets", [str(p) for p in self.evaluation_sets])
        for name in ("group_bytes", "chunk_bytes"):
            value = getattr(self, name)
            if value is None and name == "chunk_bytes":
                continue
            try:
                if parse_bytes(value) <= 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"data.prepare.{name}={value!r}: a size such as 32MB") from None
        if not self.wait_minutes > 0:
            raise ValueError(f"data.prepare.wait_minutes={self.wait_minutes!r}: a number of minutes above 0")


def plan_groups(files: list[Path], group_bytes: int | str) -> list[list[str]]:
    """The input files (sorted) dealt into consecutive groups of about ``group_bytes`` of text; a file is
    never split; a last group smaller than half the size joins the one before."""
    target = parse_bytes(group_bytes)
    groups, current, size = [], [], 0
    for path in files:
        if current and size >= target:
            groups.append(current)
            current, size = [], 0
        current.append(str(path))
        size += text_weight(path)
    if current:
        if groups and size < target / 2:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "int32"


@dataclass
class Plan:
    """What every worker is given once: the groups, the vocabulary and the settings."""

    groups: list[list[str]]
    tokenizer_json: str
    settings: InstanceSettings
    token_dtype: str
    chunk_bytes: int
    overlap: Overlap | None = None
    versions: dict[str, list] | None = None  # each input's file version when it was hashed (the key's)


def group_items(plan: Plan, tokenizer, group: int, split: str):
    """One group's instances of one split: (what reading it found, the items
    ``{"input_ids": [CLS] A [SEP] (B [SEP]), "info": [uid, where B starts, label]}`` shuffled, as the
    original shuffled each output file's instances)."""
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    cut = cut_group([Path(f) for f in plan.groups[group]], tokenizer, plan.settings, group, split, plan.overlap)
    check_unchanged(plan.versions, plan.groups[group])  # read as hashed: nothing recorded under an old hash
    order = np.random.default_rng([plan.settings.seed, group, SPLITS.index(split)]).permutation(len(cut.instances))

    def items():
        for number in order:
            ids, b_start, label = assemble(cut.tokens, cut.doc_starts, cut.instances[number], cls_id, sep_id)
            yield {"input_ids": ids.astype(plan.token_dtype),
                   "info": np.array([group << 32 | int(number), b_start, label], dtype=np.int64)}

    return cut.report, items()


def record_name(split: str, group: int) -> str:
    return f"groups/{split}-{group:06d}.json"


# -- the worker processes ---------------------------------------------------------------------------------

_worker: dict = {}


def _worker_start(parent: int, plan: Plan, cleanup: list[str]) -> None:
    """Each worker: dies with the process that started it (SIGTERM when it is gone, even by SIGKILL), and
    then removes the preparation's temporary directories; Ctrl-C is that process's to handle."""
    def stop(signum, frame):
        for path in cleanup:
            shutil.rmtree(path, ignore_errors=True)
        # what a worker's own exit does first: unlink the semaphores made in it (litdata makes one as it is
        # imported), which the resource tracker would otherwise report leaked when the run ends
        from multiprocessing import util

        util._run_finalizers(0)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not die_with_parent(parent):  # it died before the request took effect
        stop(signal.SIGTERM, None)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one group per worker process
    from tokenizers import Tokenizer

    _worker.update(plan=plan, tokenizer=Tokenizer.from_str(plan.tokenizer_json))


def _write_group(split: str, group: int, scratch: str, target_url: str) -> dict:
    """In a worker: one group's chunks of one split written, checksummed and moved to ``target_url``, then
    the group's record (written last: it marks the group done)."""
    from litdata.streaming.writer import BinaryWriter

    plan, tokenizer = _worker["plan"], _worker["tokenizer"]
    report, items = group_items(plan, tokenizer, group, split)
    directory = Path(scratch, f"{split}-{group:06d}")
    shutil.rmtree(directory, ignore_errors=True)
    # litdata names the chunks after the writer's rank; one writer a directory (it counts their indexes)
    os.environ.update(DATA_OPTIMIZER_GLOBAL_RANK=str(group), DATA_OPTIMIZER_NUM_WORKERS="1")
    writer = BinaryWriter(str(directory), chunk_bytes=plan.chunk_bytes)
    with contextlib.redirect_stdout(io.StringIO()):  # the writer prints the item format it inferred
        for index, item in enumerate(items):
            writer.add_item(index, item)
        writer.done()
    index_file = directory / f"{group}.index.json"
    written = json.loads(index_file.read_text()) if index_file.exists() else {"chunks": [], "config": None}
    target = Location(target_url)
    for chunk in written["chunks"]:
        local = directory / chunk["filename"]
        chunk["sha256"] = file_sha256(local)
        target.put_file(local, f"{split}/{chunk['filename']}")
    record = {"split": split, "group": group, "chunks": written["chunks"], "config": written["config"],
              "report": report.as_dict()}
    target.write_text(record_name(split, group), json.dumps(record))
    shutil.rmtree(directory, ignore_errors=True)
    return record


def _run_workers(tasks: list[tuple[str, int]], plan: Plan, scratch: str, target: Location, workers: int,
                 cleanup: list[str]) -> None:
    """The tasks over ``workers`` spawned processes, with a progress bar; the first error stops the rest."""
    from tqdm import tqdm

    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_start,
                               initargs=(os.getpid(), plan, cleanup))
    try:
        pending = {pool.submit(_write_group, split, group, scratch, target.url) for split, group in tasks}
        with tqdm(total=len(tasks), desc="preparing groups", unit=" groups", disable=len(tasks) < 4) as bar:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # raises the worker's error
                    bar.update(1)
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):  # a group can take minutes: stop them
            with contextlib.suppress(Exception):
                process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# -- preparation -----------------------------------------------------------------------------------------

def default_workers(num_groups: int, configured: int | None) -> int:
    if configured is not None:
        return max(1, min(configured, num_groups))
    return max(1, min(os.cpu_count() or 1, num_groups))


def prepare(location: Location, files: list[Path], tokenizer_json: str, vocab_size: int, settings: InstanceSettings,
            options: PrepareSettings, meta: dict, node_rank: int = 0, num_nodes: int = 1,
            versions: dict[str, list] | None = None) -> dict | None:
    """Prepares the dataset at ``location`` unless it is complete; returns its meta.json, or None where
    this node prepared its share of a shared place that the run's first process completes with
    :func:`finish`. ``meta``: what to record besides the counts (settings, inputs, vocabulary);
    ``versions``: each input's file version when it was hashed, which a group's files must still have
    once read (:func:`.keys.check_unchanged`)."""
    _remove_stale_scratch(location)
    done = read_meta(location)
    if done is not None:
        return done
    groups = plan_groups(files, options.group_bytes)
    overlap = options.overlap()
    plan = Plan(groups, tokenizer_json, settings, token_dtype(vocab_size), options.chunk_size(location), overlap,
                versions)
    started = time.perf_counter()
    if not options.shared(location):
        with _built_in_place(location) as build:
            _prepare_groups(build, plan, list(range(len(groups))), files, options, build_dir=build.url)
            return finish(build, files, len(groups), settings, meta, overlap, time.perf_counter() - started)
    share = np.array_split(np.arange(len(groups)), num_nodes)[node_rank].tolist()
    _prepare_groups(location, plan, share, files, options, node=(node_rank, num_nodes))
    if num_nodes > 1:
        return None
    return finish(location, files, len(groups), settings, meta, overlap, time.perf_counter() - started)


def _prepare_groups(target: Location, plan: Plan, share: list[int], files: list[Path], options: PrepareSettings,
                    build_dir: str | None = None, node: tuple[int, int] | None = None) -> None:
    """Writes the groups of ``share`` not yet recorded at ``target``. Chunks are written in a scratch
    directory (beside a local target, so that they are renamed in; the system's for an object store)."""
    tasks = [(split, group) for split in SPLITS for group in share
             if target.read_text(record_name(split, group)) is None]
    if not tasks:
        return
    need = _space_needed(plan, sorted({group for _, group in tasks}))
    free = target.free_bytes()
    if free is not None and free < need:
        raise PreparedDataError(f"{_existing(target)}: {_size(free)} free, and preparing the data needs about "
                                f"{_size(need)} there: free some space, or set data.prepare.dir")
    workers = default_workers(len({group for _, group in tasks}), options.num_workers)
    where = f" (node {node[0]} of {node[1]})" if node and node[1] > 1 else ""
    log.info("preparing %d group(s) of %d input file(s)%s with %d worker process(es) into %s",
             len({g for _, g in tasks}), len(files), where, workers, target)
    if target.remote:
        scratch = tempfile.mkdtemp(prefix=OBJECT_STORE_SCRATCH_PREFIX + _host_and_pid())
    else:
        Path(target.url).mkdir(parents=True, exist_ok=True)
        scratch = temp_directory(target.url, SCRATCH_PREFIX + _host_and_pid())
    cleanup = [scratch] + ([build_dir] if build_dir else [])
    try:
        _run_workers(tasks, plan, scratch, target, workers, cleanup)
    except OSError as err:
        if is_disk_full(err):
            raise PreparedDataError(f"{_existing(target) if not target.remote else scratch}: no space left on the "
                                    f"device while preparing the data (it needs about {_size(need)}): free some "
                                    "space, or set data.prepare.dir") from None
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _space_needed(plan: Plan, groups: list[int]) -> int:
    text = sum(text_weight(Path(f)) for g in groups for f in plan.groups[g])
    return int(text * PREPARED_PER_TEXT_BYTE * (2 if plan.token_dtype == "int32" else 1))


def _existing(location: Location) -> str:
    """The directory itself, or its nearest parent that exists (what a user can look at)."""
    path = Path(location.url)
    while not path.exists() and path != path.parent:
        path = path.parent
    return str(path)


def _size(n: int) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n} bytes"


def finish(location: Location, files: list[Path], num_groups: int, settings: InstanceSettings, meta: dict,
           overlap: Overlap | None = None, seconds: float | None = None) -> dict:
    """Once every group is recorded: each split's index (the groups' chunks in group order, in litdata's
    format) and meta.json, written last. Returns meta.json."""
    done = read_meta(location)
    if done is not None:
        return done
    records = {split: [] for split in SPLITS}
    missing = []
    for split in SPLITS:
        for group in range(num_groups):
            text = location.read_text(record_name(split, group))
            if text is None:
                missing.append(record_name(split, group))
            else:
                records[split].append(json.loads(text))
    if missing:
        raise PreparedDataError(f"{location}: the preparation of {len(missing)} group(s) is missing (the first: "
                                f"{missing[0]}); run again to prepare them")
    report = GroupReport()
    for split in SPLITS:
        for record in records[split]:
            report.add(GroupReport.from_dict(record["report"]))
    chunks = {split: [chunk for record in records[split] for chunk in record["chunks"]] for split in SPLITS}
    for split in SPLITS:
        if not chunks[split]:
            raise PreparedDataError(f"{location}: the preparation made no {split} instances (are the inputs empty, "
                                    "or data.instances.val_fraction 0?)")
    ident = identity(meta.get("vocabulary_sha256", ""), chunks)
    for split in SPLITS:
        config = next(r["config"] for r in records[split] if r["config"] is not None)
        index = {"chunks": [{k: v for k, v in c.items() if k != "sha256"} for c in chunks[split]],
                 "config": config, "updated_at": ident[:16]}  # litdata names a stream's cache after it
        location.write_text(f"{split}/index.json", json.dumps(index, sort_keys=True))
    summary = data_report(report, files, seconds, overlap)
    warn_about_losses(summary, settings.max_seq_length)
    record = {**meta, "format": FORMAT, "identity": ident, "chunks": chunks,
              "splits": {split: {"instances": sum(c["chunk_size"] for c in chunks[split]),
                                 "chunks": len(chunks[split])} for split in SPLITS},
              "report": summary}
    log.info("prepared %d documents, %d tokens%s: %d training and %d validation instances; %d tokens (%.2f%%) "
             "dropped by truncation", summary["documents"], summary["tokens"],
             f" in {seconds:.1f} s ({summary['tokens_per_second'] or 0:.0f} tokens/s)" if seconds else "",
             record["splits"]["train"]["instances"], record["splits"]["val"]["instances"], summary["tokens_dropped"],
             100 * summary["tokens_dropped_fraction"])
    location.write_text("meta.json", json.dumps(record, indent=1, sort_keys=True))
    return record


# -- a private directory built beside its place ------------------------------------------------------------

@contextlib.contextmanager
def _built_in_place(final: Location):
    """Yields where to build ``final``, a local directory: a directory beside it, renamed into it when the
    block ends without an error (a killed build leaves nothing read as complete), and removed otherwise."""
    build = Location(_build_directory(Path(final.url)))
    try:
        yield build
        _rename_into_place(Path(build.url), Path(final.url))
    finally:
        if Path(build.url).exists():
            shutil.rmtree(build.url, ignore_errors=True)


def _build_directory(final: Path) -> str:
    """A new directory beside ``final`` to build it in, named after this host and process; the ones of
    this host's processes that are gone (a preparation killed half-way) are removed first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final.parent, f".{final.name}.")
    return temp_directory(final.parent, f".{final.name}.{_host_and_pid()}")


# -- what a killed preparation leaves ----------------------------------------------------------------------

def _host_and_pid() -> str:
    """What names a temporary directory after its maker (``<host>-<pid>.``), so a later process can tell
    whether the maker is gone."""
    return f"{socket.gethostname()}-{os.getpid()}."


def remove_stale(parent: Path, prefix: str) -> list[Path]:
    """Removes the directories ``<prefix><host>-<pid>.*`` in ``parent`` made by a process of this host
    that is gone; another host's (a place the nodes share), or a live process's, are kept. Returns
    those removed."""
    start = f"{prefix}{socket.gethostname()}-"
    removed = []
    for stale in Path(parent).glob(glob.escape(start) + "*"):
        pid = stale.name[len(start):].split(".", 1)[0]
        if pid.isdigit() and stale.is_dir() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
    return removed


def _remove_stale_scratch(location: Location) -> None:
    """The scratch directories that preparations of this host killed with their workers left: in a place
    the nodes share (the dataset's own directory, complete or not), or the system's temporary directory
    (for an object store). A node-local place is built beside its final directory (:func:`_build_directory`)."""
    parent, prefix = ((Path(tempfile.gettempdir()), OBJECT_STORE_SCRATCH_PREFIX) if location.remote
                      else (Path(location.url), SCRATCH_PREFIX))
    for stale in remove_stale(parent, prefix):
        log.info("removed %s, left by a preparation of this host that was killed", stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rename_into_place(build: Path, final: Path) -> None:
    try:
        os.rename(build, final)
    except OSError:
        if not final.exists():  # another builder's identical copy is in place: ours is discarded
            raise
