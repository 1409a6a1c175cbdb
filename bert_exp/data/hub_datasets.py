"""What the corpus door and GLUE's door share to read a ``datasets`` dataset: a local folder's version, the
commit a Hub revision names now, a streaming reader of one split, and a lock for staging it once per node.
Errors are :class:`HubDatasetError` lines that begin with ``where`` (the config key the user wrote)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError, hub_refusal


class HubDatasetError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class HubSplit:
    """One split of a ``datasets`` dataset: a Hub id or a local folder, its config name and revision."""

    dataset: str
    name: str | None = None
    split: str = "train"
    revision: str | None = None

    def __str__(self) -> str:
        return f"datasets:{self.dataset}" + (f"/{self.name}" if self.name else "") + f"[{self.split}]"


def lock(path: Path):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock")


def local_version(dataset: str) -> list | None:
    """A local folder's files (name, size, mtime): a change to them stages the corpus again."""
    folder = Path(dataset).expanduser()
    if not folder.is_dir():
        return None
    return [[str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns]
            for p in sorted(folder.rglob("*")) if p.is_file()]


def hub_commit(source, where: str = "data.files") -> tuple[str | None, str]:
    """The commit that a Hub dataset's revision (``main`` when none is given) names now, or None and why
    not when the Hub cannot be asked (offline, unreachable, or failing on its side). Anything the user can
    fix (no such local folder nor Hub id, a missing revision, a refused token, a gated dataset) is one line."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

    config = datasets_module(source, where).config
    if config.HF_HUB_OFFLINE or constants.HF_HUB_OFFLINE:  # HF_HUB_OFFLINE or HF_DATASETS_OFFLINE
        return None, "offline mode is set"
    try:
        return HfApi(endpoint=config.HF_ENDPOINT).dataset_info(source.dataset, revision=source.revision).sha, ""
    except HFValidationError:
        raise HubDatasetError(f"{where}: {source}: no such local folder, and not a Hub dataset id "
                          "(OWNER/NAME)") from None
    except (RepositoryNotFoundError, RevisionNotFoundError) as err:  # gated ones too
        missing = type(err) is RepositoryNotFoundError
        raise HubDatasetError(f"{where}: {source}: {hub_refusal(err, 'dataset', config.HF_ENDPOINT, source.revision)}"
                          + ("; a local folder must exist" if missing else "")) from None
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if status is not None and status < 500 and status != 429:  # a refused token, a bad request: not transient
            raise HubDatasetError(f"{where}: {source}: the Hub answered {status}: "
                              f"{str(err).splitlines()[0]}") from None
        return None, str(err).splitlines()[0]
    except Exception as err:  # noqa: BLE001  OfflineModeIsEnabled, the HTTP client's connection errors
        return None, str(err).splitlines()[0] if str(err) else type(err).__name__


def datasets_module(source, where: str = "data.files"):
    try:
        import datasets
    except ImportError:
        raise HubDatasetError(f"{where}: {source}: reading a datasets corpus needs the datasets package: "
                          "pip install 'bert_exp[datasets]'") from None
    return datasets


def open_streaming(source, commit: str | None, where: str = "data.files"):
    datasets = datasets_module(source, where)
    try:
        return datasets.load_dataset(source.dataset, source.name, split=source.split,
                                     revision=commit or source.revision, streaming=True)
    except Exception as err:  # noqa: BLE001  DatasetNotFoundError, ValueError (a split or config), network
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HubDatasetError(f"{where}: {source}: cannot be opened with datasets.load_dataset "
                          f"({type(err).__name__}: {detail})") from None
