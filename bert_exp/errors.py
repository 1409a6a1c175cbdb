"""Errors that describe a user's mistake: the CLI prints their message alone, without a traceback."""

import errno


class UserError(Exception):
    """Bad input: a config key, a file, a row. The message names it."""


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
