"""Row validation: one JSONL line into a typed :class:`~distprompt.records.Row`, or a
:class:`~distprompt.errors.DataError` that says ``shard:line: expected …, found …; what to do``.

Checks: a JSON object with the six keys (each once: a duplicated schema key is a bad row, since
JSON parsers silently keep the last value); integer fields that are integers (not booleans or
floats); ``input_ids``/``loss_mask`` flat lists of integers of ``seq_len`` elements; ids ``>= 0``;
mask values 0/1; ``0 < n_prompt_tokens <= seq_len``; ``n_response_tokens >= 0``;
``n_prompt_tokens + n_response_tokens == seq_len``; a non-empty string ``source``. Extra keys are
allowed and ignored. The hot path stays cheap: full scans run only when a quick count says
something is off. (Ids below the tokenizer's vocabulary are checked by the pass, which knows it.)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import orjson

from distprompt.errors import DataError
from distprompt.records import Provenance, Row

__all__ = ["DEFAULT_MAX_LINE_BYTES", "REQUIRED_KEYS", "parse_row"]

#: Lines longer than this are refused rather than read into memory. A row of a million tokens
#: takes about 10 MB of JSON (ids and mask), so 64 MiB leaves room for any real row while a shard
#: whose newlines are missing is caught before it fills memory.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024

REQUIRED_KEYS = (
    "input_ids",
    "loss_mask",
    "seq_len",
    "n_prompt_tokens",
    "n_response_tokens",
    "source",
)


def _bad(shard: str, line: int, reason: str, detail: str) -> DataError:
    return DataError(shard, line, reason, detail)


def _int_field(obj: dict[str, Any], key: str, shard: str, line: int) -> int:
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(
            shard,
            line,
            f"bad_{key}",
            f"expected {key!r} to be an integer, found {type(v).__name__} {_short(v)}; "
            "fix the row or run with --on-error skip",
        )
    return v


def _short(v: Any, limit: int = 40) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _int_array(v: Any, key: str, shard: str, line: int, *, check_bools: bool) -> np.ndarray:
    if not isinstance(v, list):
        raise _bad(
            shard,
            line,
            f"bad_{key}",
            f"expected {key!r} to be a list of integers, found {type(v).__name__} {_short(v)}; "
            "fix the row or run with --on-error skip",
        )
    try:
        arr = np.asarray(v)
    except (ValueError, OverflowError):
        arr = None  # ragged or nested: reported below
    # numpy turns [True, 1] into int64; the caller asks for the exact check when the raw line
    # holds a literal that could be a boolean.
    ok = (
        arr is not None
        and arr.ndim == 1
        and arr.dtype.kind == "i"
        and not (check_bools and any(type(x) is bool for x in v))
    )
    if ok:
        assert arr is not None
        return arr.astype(np.int64, copy=False)
    if len(v) == 0:
        return np.zeros(0, dtype=np.int64)
    raise _bad(
        shard,
        line,
        f"bad_{key}",
        f"expected {key!r} to hold only integers below 2**63, found {_first_non_int(v)}; "
        "fix the row or run with --on-error skip",
    )


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    return "object" if isinstance(v, dict) else "null"


def _first_non_int(v: list[Any]) -> str:
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int):
            return f"{type(x).__name__} {_short(x)}"
        if not -(2**63) <= x < 2**63:
            return f"{x} (out of range)"
    return _short(v)


#: Quote, ``u`` and ``l`` counts of the six keys written as JSON (``"input_ids"`` ...).
_KEY_QUOTES = 2 * len(REQUIRED_KEYS)
_KEY_US = sum(k.count("u") for k in REQUIRED_KEYS)
_KEY_LS = sum(k.count("l") for k in REQUIRED_KEYS)
_REQUIRED = frozenset(REQUIRED_KEYS)


def _unexplained(raw: bytes, obj: dict[str, Any]) -> bool:
    """Whether the raw line holds quotes, ``u`` or ``l`` letters the parsed row does not explain.

    Cheap (three byte counts): a duplicated key adds quotes that the parsed dict dropped, and a
    ``true`` among the ids adds a ``u``, a ``false`` two ``l``. Those letters are written only
    in strings and in the literals ``true``, ``false`` and ``null`` — never in a number, whose
    spelling a writer may choose (``1e-07`` or ``0.0000001``: an ``e`` would prove nothing) —
    and without ``\\u`` escapes a string is re-serialized with the same letters and quotes. So
    a line written by any JSON writer has exactly the counts of the parsed row re-serialized;
    a mismatch sends the line to the exact (slow) checks and a match proves there is nothing
    to find.
    """
    if b"\\" in raw and b"\\u" in raw:
        return True
    try:
        aux = orjson.dumps(obj["source"])
        if len(obj) > len(REQUIRED_KEYS):
            aux += orjson.dumps({k: v for k, v in obj.items() if k not in _REQUIRED})
    except orjson.JSONEncodeError:  # nesting deeper than orjson writes
        return True
    return (
        _count(raw, b'"') != _KEY_QUOTES + aux.count(b'"')
        or _count(raw, b"u") != _KEY_US + aux.count(b"u")
        or _count(raw, b"l") != _KEY_LS + aux.count(b"l")
    )


def _count(raw: bytes, byte: bytes) -> int:
    """``raw.count(byte)`` for a rare byte, 4x faster on long lines: deleting it finds each
    with ``memchr`` where ``count`` compares every byte."""
    return len(raw) - len(raw.replace(byte, b""))


#: Strings and brackets of a JSON text: enough to find the top-level keys without recursion.
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


def _duplicated_key(raw: bytes) -> str | None:
    """The first key of the schema that appears twice at the top level of the line, if any."""
    if b"\\u" not in raw and not any(
        raw.count(b'"' + k.encode() + b'"') > 1 for k in REQUIRED_KEYS
    ):
        return None  # no key written twice (``\\u`` escapes could spell one differently)
    seen: set[str] = set()
    depth = 0
    prev = b""
    for m in _JSON_TOKENS.finditer(raw):
        tok = m.group()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif tok == b":" and depth == 1:
            key = orjson.loads(prev)
            if key in _REQUIRED and key in seen:
                return str(key)
            seen.add(key)
        prev = tok
    return None


def parse_row(raw: bytes | None, *, shard: str, line: int, offset: int) -> Row:
    """Parse and validate one JSONL line into a :class:`Row`.

    Raises:
        DataError: The line is not a valid row; ``reason`` names the check that failed.
    """
    if raw is None:
        raise _bad(
            shard,
            line,
            "line_too_long",
            "expected a JSON line of reasonable size, found a line longer than the limit "
            f"(max_line_bytes, {DEFAULT_MAX_LINE_BYTES >> 20} MiB by default); a newline is "
            "probably missing — fix the shard or run with --on-error skip",
        )
    obj, suspect = _json_object(raw, shard, line)
    source = obj["source"]
    if not isinstance(source, str) or not source.strip():
        raise _bad(
            shard,
            line,
            "bad_source",
            f"expected 'source' to be a non-empty string, found {_short(source)}; "
            "fix the row or run with --on-error skip",
        )
    seq_len = _int_field(obj, "seq_len", shard, line)
    n_prompt = _int_field(obj, "n_prompt_tokens", shard, line)
    n_resp = _int_field(obj, "n_response_tokens", shard, line)
    ids = _int_array(obj["input_ids"], "input_ids", shard, line, check_bools=suspect)
    mask = _int_array(obj["loss_mask"], "loss_mask", shard, line, check_bools=suspect)
    _check_lengths(ids, mask, seq_len, n_prompt, n_resp, shard, line)
    return Row(
        source=source,
        input_ids=ids,
        loss_mask=mask.astype(np.int8, copy=False),
        seq_len=seq_len,
        n_prompt_tokens=n_prompt,
        n_response_tokens=n_resp,
        provenance=Provenance(shard=shard, line=line, offset=offset),
    )


def _json_object(raw: bytes, shard: str, line: int) -> tuple[dict[str, Any], bool]:
    """The line's JSON object with every required key, and whether its text holds more than
    the object explains (then a duplicated key has been ruled out).

    Raises:
        DataError: Not JSON, not an object, a key missing or given twice.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        what = "invalid UTF-8" if "utf-8" in str(exc).lower() else f"invalid JSON ({exc})"
        raise _bad(
            shard,
            line,
            "invalid_json",
            f"expected one JSON object per line, found {what}; a truncated or corrupt line — "
            "fix it or run with --on-error skip",
        ) from None
    if not isinstance(obj, dict):
        raise _bad(
            shard,
            line,
            "not_an_object",
            f"expected a JSON object, found a JSON {_json_type(obj)} {_short(obj)}; "
            "fix the row or run with --on-error skip",
        )
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise _bad(
            shard,
            line,
            f"missing_{missing[0]}",
            f"expected keys {', '.join(REQUIRED_KEYS)}, found {missing[0]!r} missing; "
            "fix the row or run with --on-error skip",
        )
    suspect = _unexplained(raw, obj)
    if suspect:
        dup = _duplicated_key(raw)
        if dup is not None:
            raise _bad(
                shard,
                line,
                "duplicate_key",
                f"expected each key once, found {dup!r} twice (a JSON reader would silently "
                "keep the last one); fix the writer of this shard or run with --on-error skip",
            )
    return obj, suspect


def _check_lengths(
    ids: np.ndarray,
    mask: np.ndarray,
    seq_len: int,
    n_prompt: int,
    n_resp: int,
    shard: str,
    line: int,
) -> None:
    """The row's ids, mask and counts agree with each other.

    Raises:
        DataError: The first check that fails.
    """
    if ids.size and ids.min() < 0:
        raise _bad(
            shard,
            line,
            "negative_id",
            f"expected token ids >= 0, found {int(ids.min())}; fix the row or run with "
            "--on-error skip",
        )
    if seq_len != ids.shape[0]:
        raise _bad(
            shard,
            line,
            "seq_len_mismatch",
            f"expected seq_len == len(input_ids), found seq_len={seq_len} and "
            f"len(input_ids)={ids.shape[0]}; fix the row or run with --on-error skip",
        )
    if mask.shape[0] != ids.shape[0]:
        raise _bad(
            shard,
            line,
            "loss_mask_length",
            f"expected len(loss_mask) == len(input_ids) == {ids.shape[0]}, found "
            f"{mask.shape[0]}; fix the row or run with --on-error skip",
        )
    if mask.size and (mask.min() < 0 or mask.max() > 1):
        raise _bad(
            shard,
            line,
            "bad_loss_mask",
            "expected loss_mask values 0 or 1, found "
            f"{int(mask.max() if mask.max() > 1 else mask.min())}; fix the row or run with "
            "--on-error skip",
        )
    if not 0 < n_prompt <= seq_len:
        raise _bad(
            shard,
            line,
            "bad_n_prompt_tokens",
            f"expected 0 < n_prompt_tokens <= seq_len ({seq_len}), found {n_prompt}; "
            "fix the row or run with --on-error skip",
        )
    if n_resp < 0:
        raise _bad(
            shard,
            line,
            "bad_n_response_tokens",
            f"expected n_response_tokens >= 0, found {n_resp}; fix the row or run with "
            "--on-error skip",
        )
    if n_prompt + n_resp != seq_len:
        raise _bad(
            shard,
            line,
            "length_sum_mismatch",
            f"expected n_prompt_tokens + n_response_tokens == seq_len ({seq_len}), found "
            f"{n_prompt} + {n_resp} = {n_prompt + n_resp}; one of the counts is wrong, so "
            "where the prompt ends is in doubt — fix the row or run with --on-error skip",
        )
