"""Models named on the HuggingFace Hub: ``hf:NAME[@REVISION]``, or a bare ``NAME`` (``bert-base-uncased``,
``google/bert_uncased_L-4_H-256_A-4``) that is not a local path.

The files a BERT directory needs are fetched with ``huggingface_hub`` into its usual cache, so ``HF_HOME``,
``HF_HUB_CACHE``, ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN`` (or ``hf auth login``) behave as
in every HuggingFace tool; the snapshot directory then loads as a local directory does."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError, hub_refusal

PREFIX = "hf:"
# a Hub repository id: NAME or OWNER/NAME (letters, digits, '-', '_', '.'), optionally @REVISION
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?(@[\w./-]+)?$")
_LOCAL_SUFFIXES = (".ckpt", ".safetensors", ".bin", ".pt", ".json", ".txt")
CONFIG = "config.json"
WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first the repository has is fetched
SHARD_INDEX = "model.safetensors.index.json"  # else a sharded model: this index and the files it names
VOCABULARY = ("vocab.txt", "tokenizer.json")
OPTIONAL = ("tokenizer_config.json",)


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    revision: str | None  # as asked (a branch, tag or commit); None: the default branch
    commit: str  # what it resolved to
    path: Path  # the snapshot directory in the Hub cache

    @property
    def record(self) -> dict:
        return {"repo_id": self.repo_id, "revision": self.revision, "commit": self.commit}


def hub_name(source: str | Path) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``source`` names a Hub model, else None (a local path).

    ``hf:`` always means the Hub; a bare name does when no such local path exists and it reads as a
    repository id (no leading '/', '.' or '~', at most one '/', no file suffix such as .ckpt)."""
    text = str(source)
    if text.startswith(PREFIX):
        name = text[len(PREFIX):]
        if not _REPO_ID.match(name):
            raise CheckpointError(f"{text}: not a Hub model name (hf:NAME, hf:OWNER/NAME or hf:OWNER/NAME@REVISION)")
    else:
        name = text
        if (Path(text).expanduser().exists() or not _REPO_ID.match(text)
                or text.split("@")[0].endswith(_LOCAL_SUFFIXES)):
            return None
    repo_id, _, revision = name.partition("@")
    return repo_id, revision or None


def _download(repo_id: str, filename: str, revision: str | None) -> Path:
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id, filename, revision=revision))


def _first_present(repo_id: str, names: tuple[str, ...], revision: str) -> Path | None:
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    for name in names:
        try:
            return _download(repo_id, name, revision)
        except (EntryNotFoundError, LocalEntryNotFoundError):
            continue
    return None


def _unreachable_uncached(repo_id: str, revision: str | None) -> str | None:
    """Why the Hub cannot be asked for a model its cache does not hold (a refused connection, a timeout), else
    None. Asked once: huggingface_hub, finding no cached copy, retries a failed request five times over 23 s
    (no setting turns that off), to end in the error a single try gives."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError

    if try_to_load_from_cache(repo_id, CONFIG, revision=revision) is not None:
        return None  # cached (or known absent): huggingface_hub falls back to the cache without retrying
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, CONFIG, revision=revision))  # one try (retry_on_errors=False)
    except HfHubHTTPError:
        return None  # the Hub answered: what it said is fetch's to report
    except Exception as err:  # noqa: BLE001  the HTTP client's connection errors and timeouts
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def fetch(repo_id: str, revision: str | None = None) -> HubModel:
    """config.json, the weights and the vocabulary of ``repo_id`` (one error line for each way it fails)."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (LocalEntryNotFoundError, RemoteEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    where = f"hf:{repo_id}" + (f"@{revision}" if revision else "")
    unreachable = None if constants.HF_HUB_OFFLINE else _unreachable_uncached(repo_id, revision)
    if unreachable:
        raise CheckpointError(f"{where}: not in the Hub cache ({constants.HF_HUB_CACHE}) and {constants.ENDPOINT} "
                              f"cannot be reached ({unreachable}): check the network, or set HF_ENDPOINT to a mirror")
    try:
        config = _download(repo_id, CONFIG, revision)
    except (RepositoryNotFoundError, RevisionNotFoundError) as err:  # gated ones too
        raise CheckpointError(f"{where}: {hub_refusal(err, 'model', constants.ENDPOINT, revision)}") from None
    except RemoteEntryNotFoundError:
        raise CheckpointError(f"{where}: the model has no {CONFIG}, so it is not a transformers model "
                              "bert_exp can read") from None
    except LocalEntryNotFoundError:
        offline = constants.HF_HUB_OFFLINE
        raise CheckpointError(
            f"{where}: not in the Hub cache ({constants.HF_HUB_CACHE}) and "
            + ("HF_HUB_OFFLINE is set: run once online to fetch it" if offline
               else f"{constants.ENDPOINT} cannot be reached: check the network, or set HF_ENDPOINT to a mirror")
        ) from None
    commit = config.parent.name  # files land in snapshots/<commit>/
    if _first_present(repo_id, WEIGHTS, commit) is None:
        index = _first_present(repo_id, (SHARD_INDEX,), commit)  # a sharded model: the index, then its files
        if index is None:
            raise CheckpointError(f"{where}: the model has neither {' nor '.join(WEIGHTS)} nor {SHARD_INDEX} "
                                  "(TensorFlow- or Flax-only weights are not read)")
        for name in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            if _first_present(repo_id, (name,), commit) is None:
                raise CheckpointError(f"{where}: {SHARD_INDEX} names {name}, which the model lacks")
    _first_present(repo_id, VOCABULARY, commit)  # a model without one takes the data's vocabulary
    for name in OPTIONAL:
        _first_present(repo_id, (name,), commit)
    return HubModel(repo_id, revision, commit, config.parent)


@functools.lru_cache(maxsize=16)
def _fetch_once(repo_id: str, revision: str | None, endpoint: str, cache: str, offline: bool) -> HubModel:
    """:func:`fetch`, once per process for one endpoint, cache and mode: a run reads the model's config (its
    shape) and then its weights, and each would otherwise ask the Hub again (failures are not kept)."""
    return fetch(repo_id, revision)


def local_source(source: str | Path) -> tuple[Path, HubModel | None]:
    """The local path ``source`` names, fetching it first when it names a Hub model."""
    name = hub_name(source)
    if name is None:
        return Path(source).expanduser(), None
    from huggingface_hub import constants

    try:
        model = _fetch_once(*name, constants.ENDPOINT, str(constants.HF_HUB_CACHE), bool(constants.HF_HUB_OFFLINE))
    except CheckpointError as err:
        if str(source).startswith(PREFIX):
            raise
        # a bare name: perhaps a local path with a typo
        raise CheckpointError(f"{source}: no such local directory or file, nor a Hub model: {err}") from None
    return model.path, model
