"""Errors that describe a user's mistake: the CLI prints their message alone, without a traceback."""


class UserError(Exception):
    """Bad input: a config key, a file, a row. The message names it."""


class CheckpointError(UserError, ValueError):
    """A checkpoint that cannot be read or does not fit; the message names the file."""
