"""The exception tree. Every error distprompt raises on purpose is a :class:`DistpromptError`.

Each subclass also inherits the builtin a caller would naturally catch, so ``except ValueError``
keeps working::

    DistpromptError
    ├── ConfigError(ValueError)            invalid options, caught before any shard is read
    ├── InputError(OSError)                DATA missing, no shard matches, unreadable/corrupt file
    │   └── CorruptStreamError             a .gz/.zst shard is truncated or corrupt (skippable)
    ├── DataError(ValueError)              a row breaks the schema: carries shard, line, reason
    ├── TokenizerError(ValueError)         tokenizer missing, not a tokenizer, or not the data's
    │   └── TemplateError                  no usable chat template
    ├── OutputError(OSError)               OUT exists and is not empty, not writable, disk full
    └── ServerError(ConnectionError)       ``bench``: no server answers at --url, or not the API

Messages follow one shape: ``shard:line: expected …, found …; what to do``. The CLI is the only
place an exception becomes an exit code (2 for a :class:`DistpromptError`).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptStreamError",
    "DataError",
    "DistpromptError",
    "InputError",
    "OutputError",
    "ServerError",
    "TemplateError",
    "TokenizerError",
]


class DistpromptError(Exception):
    """Base class of every error distprompt raises on purpose."""


class ConfigError(DistpromptError, ValueError):
    """An option is invalid; raised before any shard is read."""


class InputError(DistpromptError, OSError):
    """The corpus cannot be found or read: no shard matches, a file is unreadable or corrupt."""


class CorruptStreamError(InputError):
    """A compressed shard is truncated or does not decompress.

    The rows before the damage have been read; with ``--on-error skip`` the rest of the shard is
    counted once as ``corrupt_stream`` instead of stopping the run.
    """


class DataError(DistpromptError, ValueError):
    """A row does not follow the schema.

    Attributes:
        shard: Shard path relative to DATA, with ``/``.
        line: 1-based line number (0 when the problem is not tied to a line).
        reason: A short machine-readable reason, the key skipped rows are counted under.
    """

    def __init__(self, shard: str, line: int, reason: str, detail: str) -> None:
        self.shard = shard
        self.line = line
        self.reason = reason
        self.detail = detail
        where = f"{shard}:{line}" if line else shard
        super().__init__(f"{where}: {detail}")

    def __reduce__(self) -> tuple[type[DataError], tuple[str, int, str, str]]:
        # Rebuilt from its fields when it crosses a process boundary (parallel shard reading).
        return (type(self), (self.shard, self.line, self.reason, self.detail))


class TokenizerError(DistpromptError, ValueError):
    """The tokenizer cannot be loaded or does not match the data."""


class TemplateError(TokenizerError):
    """The tokenizer has no chat template distprompt can learn from."""


class OutputError(DistpromptError, OSError):
    """The output folder cannot be written as asked."""


class ServerError(DistpromptError, ConnectionError):
    """``bench``: no server answers at the URL, or it does not speak the API asked for."""
