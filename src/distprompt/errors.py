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

Messages are written once, naming command-line options (``pass --overwrite``). The public
functions are wrapped in :func:`api_spelling`, which renames them to the function's arguments
(``pass `overwrite=True```) when the error leaves the library through the API; the CLI runs its
commands inside :func:`cli_spelling` and keeps the option names. Options inside backticks (a whole
command to run) are left as written.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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


_F = TypeVar("_F", bound=Callable[..., Any])

# Set while the CLI runs a command: its errors keep the option names the user typed.
_CLI = contextvars.ContextVar("distprompt_cli_spelling", default=False)

# Options whose API argument is not the option's name with ``_`` for ``-`` (flags and choices).
_API_NAMES = {
    "--overwrite": "`overwrite=True`",
    "--no-tokenizer-check": "`check_tokenizer=False`",
    "--no-turns": "`recover_turns=False`",
    "--ignore-eos": "`ignore_eos=True`",
    "--allow-inexact": "`allow_inexact=True`",
}
_OPTION = re.compile(r"`[^`]*`|--(?:on-error|api) (\w+)|--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")


def _api_word(m: re.Match[str]) -> str:
    text = m.group(0)
    if text.startswith("`"):
        return text  # a command to run, written as the user types it
    if m.group(1) is not None:
        name = text.split()[0][2:].replace("-", "_")
        return f'`{name}="{m.group(1)}"`'
    return _API_NAMES.get(text, f"`{m.group(2).replace('-', '_')}`")


def api_message(message: str) -> str:
    """``message`` with its command-line options named as the API's arguments.

    Example:
        >>> api_message("pass --overwrite to replace it, or choose another --out")
        'pass `overwrite=True` to replace it, or choose another `out`'
    """
    return _OPTION.sub(_api_word, message)


def _respell(exc: DistpromptError) -> None:
    if isinstance(exc, DataError):
        exc.detail = api_message(exc.detail)
    exc.args = tuple(api_message(a) if isinstance(a, str) else a for a in exc.args)


def api_spelling(fn: _F) -> _F:
    """Wrap a public function so that its errors name API arguments, not CLI options."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DistpromptError as exc:
            if not _CLI.get():
                _respell(exc)
            raise

    return wrapper  # type: ignore[return-value]


@contextlib.contextmanager
def cli_spelling() -> Iterator[None]:
    """Within this block, errors keep the command-line option names (the CLI's commands)."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)
