"""Errors that describe a user's mistake: the CLI prints their message alone, without a traceback."""

import errno


class UserError(Exception):
    """Bad input: a config key, a file, a row. The message names it.

    One raised in a DataLoader worker reaches the main process rebuilt by PyTorch from the worker's
    traceback as text (``Caught X in DataLoader worker process 0. Original Traceback ...``): its own
    message is taken back from the traceback's last line, so the CLI still prints that line alone."""

    def __init__(self, *args):
        if len(args) == 1 and isinstance(args[0], str):
            args = (_own_message(type(self), args[0]),)
        super().__init__(*args)


def _own_message(kind: type, text: str) -> str:
    """``text`` itself, or where it is PyTorch's report of a ``kind`` raised in a worker, the message that
    ends it (``module.Name: message``, as Python formats an exception)."""
    if not (text.startswith(f"Caught {kind.__name__} in ") and "\nOriginal Traceback" in text):
        return text
    header = f"\n{kind.__module__}.{kind.__qualname__}: "
    at = text.rfind(header)
    return text[at + len(header):].rstrip("\n") if at >= 0 else text


class ConfigError(UserError, ValueError):
    """A config mistake; the message names the key."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be read or does not fit; the message names the file."""


class OutOfSpace(UserError, OSError):
    """The disk filled up while a file was written (a checkpoint, a cache's record); the message names it
    and says what to do."""


def is_disk_full(err: BaseException) -> bool:
    """ENOSPC, or a quota reached (EDQUOT): the same remedy."""
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def hub_refusal(err: Exception, kind: str, endpoint: str, revision: str | None) -> str | None:
    """What the Hub's refusal ``err`` means for a ``kind`` ("model", "dataset") in one line, or None when
    ``err`` is not one of them: gated, no such repository (or a private one), no such revision."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    login = "log in with `hf auth login` or set HF_TOKEN"
    if isinstance(err, GatedRepoError):  # before RepositoryNotFoundError, its base class
        return f"the Hub refuses access (a gated or private {kind}): accept its terms on its page and {login}"
    if isinstance(err, RepositoryNotFoundError):
        return f"no such {kind} on {endpoint} (or it is private: {login})"
    if isinstance(err, RevisionNotFoundError):
        return f"the {kind} has no revision {revision!r} (a branch, tag or commit)"
    return None
