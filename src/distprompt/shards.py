"""Discover shards, stream their lines, validate rows and stamp provenance.

Shards are listed in sorted order and read as byte streams (``.jsonl``, ``.jsonl.gz``,
``.jsonl.zst``); memory does not depend on file size. Each line's provenance is the shard path
relative to DATA (with ``/``), its 1-based line number and the byte offset of its start in the
uncompressed stream, so ``open(shard).seek(offset)`` lands on it.
"""

from __future__ import annotations

import glob as globlib
import gzip
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from distprompt.errors import DataError, InputError
from distprompt.records import Provenance, Row

__all__ = [
    "REQUIRED_KEYS",
    "SHARD_SUFFIXES",
    "Shard",
    "discover_shards",
    "iter_lines",
    "iter_rows",
    "open_shard",
    "parse_row",
]

logger = logging.getLogger("distprompt.shards")

SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
REQUIRED_KEYS = (
    "input_ids",
    "loss_mask",
    "seq_len",
    "n_prompt_tokens",
    "n_response_tokens",
    "source",
)
#: Lines longer than this are refused rather than read into memory.
DEFAULT_MAX_LINE_BYTES = 512 * 1024 * 1024
_READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard file and the name provenance uses for it."""

    path: Path
    name: str  # relative to DATA, with "/"
    size: int


def _is_shard(p: Path) -> bool:
    return p.name.endswith(SHARD_SUFFIXES)


def discover_shards(data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Shard]:
    """List the shards DATA names, in sorted order.

    Args:
        data: A directory (searched recursively for ``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst``),
            a glob pattern, a file, or a list of those.

    Returns:
        Shards sorted by their relative name; names are relative to the directory, the glob's
        fixed prefix, or (for files) their common parent.

    Raises:
        InputError: Nothing exists at DATA, or no shard matches.

    Example:
        >>> discover_shards("data_samples/prepared")[0].name  # doctest: +SKIP
        'A1_deepswekimi/tokenized_data.jsonl'
    """
    specs = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    if not specs:
        raise InputError("expected DATA (a directory, a glob or files), found nothing")
    found: dict[Path, Shard] = {}
    for spec in specs:
        for shard in _discover_one(str(spec), single=len(specs) == 1):
            found.setdefault(shard.path.resolve(), shard)
    if len(specs) > 1:
        # Several inputs: name each file relative to the common parent of all of them.
        paths = [s.path.resolve() for s in found.values()]
        root = Path(os.path.commonpath([str(p.parent) for p in paths])) if paths else Path(".")
        found = {
            p: Shard(path=s.path, name=p.relative_to(root).as_posix(), size=s.size)
            for p, s in found.items()
        }
    shards = sorted(found.values(), key=lambda s: s.name)
    if not shards:
        raise InputError(
            f"{data}: expected shards named *.jsonl, *.jsonl.gz or *.jsonl.zst, found none; "
            "check the path or the glob"
        )
    return shards


def _discover_one(spec: str, *, single: bool) -> Iterator[Shard]:
    path = Path(spec)
    if path.is_dir():
        root = path
        seen_dirs: set[tuple[int, int]] = set()
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            st = os.stat(dirpath)
            ident = (st.st_dev, st.st_ino)
            if ident in seen_dirs:  # a symlink loop: do not walk it twice
                logger.warning("%s: symlink loop, not followed again", dirpath)
                dirnames[:] = []
                continue
            seen_dirs.add(ident)
            dirnames.sort()
            for fn in sorted(filenames):
                p = Path(dirpath) / fn
                if _is_shard(p) and p.is_file():
                    yield Shard(path=p, name=p.relative_to(root).as_posix(), size=p.stat().st_size)
        return
    if path.is_file():
        yield Shard(path=path, name=path.name, size=path.stat().st_size)
        return
    if globlib.has_magic(spec):
        # Relative names start below the glob's fixed prefix.
        parts = Path(spec).parts
        fixed = []
        for part in parts:
            if globlib.has_magic(part):
                break
            fixed.append(part)
        root = Path(*fixed) if fixed else Path(".")
        for m in sorted(globlib.glob(spec, recursive=True)):
            p = Path(m)
            if p.is_file() and _is_shard(p):
                yield Shard(path=p, name=p.relative_to(root).as_posix(), size=p.stat().st_size)
        return
    raise InputError(
        f"{spec}: expected a directory, a glob or a shard file, found nothing at that path; "
        "check the path"
    )


def open_shard(path: Path) -> IO[bytes]:
    """Open a shard as a binary stream of uncompressed bytes."""
    name = path.name
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise InputError(f"{path}: expected a readable file, found {exc.strerror or exc}") from exc
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if name.endswith(".zst"):
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
        return io.BufferedReader(reader, buffer_size=_READ_CHUNK)  # type: ignore[arg-type]
    return raw


def iter_lines(
    shard: Shard, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield ``(line_number, offset, raw_line)`` for each line of a shard.

    Line endings (LF or CRLF) and a leading UTF-8 BOM are stripped. A line longer than
    ``max_line_bytes`` is not held in memory: it is yielded as ``None`` (the caller reports it)
    and the rest of it is skipped.
    """
    lineno = 0
    offset = 0
    try:
        with open_shard(shard.path) as fh:
            while True:
                line = fh.readline(max_line_bytes + 1)
                if not line:
                    return
                start = offset
                lineno += 1
                offset += len(line)
                if len(line) > max_line_bytes and not line.endswith(b"\n"):
                    # Too long: skip to the end of the line without keeping it.
                    while True:
                        rest = fh.readline(_READ_CHUNK)
                        offset += len(rest)
                        if not rest or rest.endswith(b"\n"):
                            break
                    yield lineno, start, None
                    continue
                if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                    line = line[3:]
                yield lineno, start, line.rstrip(b"\r\n")
    except (OSError, EOFError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        # zstandard raises ZstdError (a subclass of Exception); caught below by name.
        raise InputError(
            f"{shard.name}:{lineno + 1}: expected a readable, complete stream, found "
            f"{type(exc).__name__}: {exc}; the file is truncated or corrupt — re-copy it or "
            "exclude it"
        ) from exc
    except Exception as exc:
        if type(exc).__name__ == "ZstdError":
            raise InputError(
                f"{shard.name}:{lineno + 1}: expected a valid zstd stream, found {exc}; "
                "the file is truncated or corrupt — re-copy it or exclude it"
            ) from exc
        raise


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


def _int_array(v: Any, key: str, shard: str, line: int) -> np.ndarray:
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
        arr = np.asarray([0, "x"], dtype=object)  # ragged/nested: fall through to the type error
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        if len(v) == 0:
            return np.zeros(0, dtype=np.int64)
        bad = next((x for x in v if isinstance(x, bool) or not isinstance(x, int)), v[0])
        raise _bad(
            shard,
            line,
            f"bad_{key}",
            f"expected {key!r} to hold only integers, found {type(bad).__name__} {_short(bad)}; "
            "fix the row or run with --on-error skip",
        )
    return arr.astype(np.int64, copy=False)


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
            "expected a JSON line of reasonable size, found a line longer than the limit; "
            "the shard is probably corrupt",
        )
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
            f"expected a JSON object, found a JSON {type(obj).__name__}; "
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
    ids = _int_array(obj["input_ids"], "input_ids", shard, line)
    mask = _int_array(obj["loss_mask"], "loss_mask", shard, line)
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
    return Row(
        source=source,
        input_ids=ids,
        loss_mask=mask.astype(np.int8, copy=False),
        seq_len=seq_len,
        n_prompt_tokens=n_prompt,
        n_response_tokens=n_resp,
        provenance=Provenance(shard=shard, line=line, offset=offset),
    )


def iter_rows(
    shard: Shard,
    *,
    skipped: dict[str, int] | None = None,
    first_skip: dict[str, str] | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[Row]:
    """Yield the valid rows of a shard.

    Args:
        shard: The shard to read.
        skipped: When given, bad rows are counted here by reason and skipped; when None, the
            first bad row raises :class:`DataError`.
        first_skip: When given with ``skipped``, the first ``shard:line`` of each reason.
        max_line_bytes: Longer lines are refused without being held in memory.

    Blank lines are not rows: they are passed over (counted under ``blank_line`` when skipping).
    """
    for lineno, offset, raw in iter_lines(shard, max_line_bytes=max_line_bytes):
        if raw is not None and not raw.strip():
            if skipped is not None:
                skipped["blank_line"] = skipped.get("blank_line", 0) + 1
            continue
        try:
            yield parse_row(raw, shard=shard.name, line=lineno, offset=offset)
        except DataError as exc:
            if skipped is None:
                raise
            skipped[exc.reason] = skipped.get(exc.reason, 0) + 1
            if first_skip is not None:
                first_skip.setdefault(exc.reason, f"{exc.shard}:{exc.line}")
