"""Errors that eoscale raises on purpose.

A `UserError` is a mistake in what the user gave (a path, a value, a file): the CLI prints its one-line
message and exits with code 2, without a traceback. Anything else is a bug and keeps its traceback.
Each class also subclasses the builtin it means, so callers can catch `FileNotFoundError` and the like.
"""

from __future__ import annotations


class EoscaleError(Exception):
    """Base class of every error eoscale raises on purpose."""


class UserError(EoscaleError):
    """A mistake in the user's input; the message says what is wrong and how to fix it."""

    exit_code = 2


class InputError(UserError, ValueError):
    """A value, option or file content that eoscale cannot use."""


class InputNotFoundError(UserError, FileNotFoundError):
    """A path the user named does not exist."""


class OutputExistsError(UserError, FileExistsError):
    """An output exists and the user did not ask to replace it."""


class StoreError(UserError, ValueError):
    """A tile store that cannot be read: missing, incomplete, of another schema version, or damaged."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No tile store at the given path."""


class IncompleteStoreError(StoreError):
    """A tile store whose ingest has not finished."""


class BandMismatchError(UserError, ValueError):
    """Bands of a scene, store or checkpoint that do not match what is required."""
