"""Shards behind fsspec URLs: ``s3://``, ``gs://``, ``hf://``, ``az://``, ``file://``, ….

DATA given as a URL is listed and read through `fsspec <https://filesystem-spec.readthedocs.io>`_
when the filesystem's backend is installed (``s3fs`` for ``s3://``, ``gcsfs`` for ``gs://``,
``huggingface_hub`` for ``hf://``, ``adlfs`` for ``az://``; ``file://`` and ``memory://`` need
nothing). Local paths never come here. Shards are named as for local DATA — relative to the
folder, the glob's fixed prefix, or (several inputs) their common parent — so
``file:///abs/prepared`` gives the same suite, byte for byte, as ``/abs/prepared``. A URL shard's
:attr:`~distprompt.read.shards.Shard.url` is what workers open (on every node of a Ray cluster: each
needs the backend and the credentials).
"""

from __future__ import annotations

import glob as globlib
import posixpath
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from distprompt.errors import InputError
from distprompt.records import SHARD_PATTERNS, UNSUPPORTED_SUFFIXES, Shard, is_shard_file

__all__ = ["discover_urls", "is_url", "open_url"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_BACKENDS = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "hf": "huggingface_hub",
    "az": "adlfs",
    "abfs": "adlfs",
    "http": "aiohttp",
    "https": "aiohttp",
}


def is_url(spec: str) -> bool:
    """Whether ``spec`` is a URL with a protocol (``s3://…``), as opposed to a local path.

    Example:
        >>> is_url("s3://bucket/prepared"), is_url("prepared/")
        (True, False)
    """
    return bool(_URL.match(spec))


def _filesystem(url: str) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    protocol = url.split("://", 1)[0]
    try:
        return url_to_fs(url)
    except ImportError as exc:
        pkg = _BACKENDS.get(protocol, f"the fsspec backend for {protocol}://")
        raise InputError(
            f"{url}: expected the fsspec backend for {protocol}:// to be installed, found "
            f"{exc}; pip install {pkg}"
        ) from exc
    except ValueError as exc:
        raise InputError(
            f"{url}: expected a URL of a filesystem fsspec knows (s3://, gs://, hf://, "
            f"file://, …), found {exc}; check the protocol"
        ) from exc


def open_url(url: str) -> IO[bytes]:
    """Open a shard URL as a binary stream of its (still compressed) bytes.

    Raises:
        InputError: No backend for the protocol, or the file cannot be opened.
    """
    fs, path = _filesystem(url)
    try:
        return fs.open(path, "rb")
    except OSError as exc:
        raise InputError(
            f"{url}: expected a readable file, found {exc.strerror or exc}; check the URL and "
            "the credentials of this machine"
        ) from exc


def discover_urls(specs: Sequence[str], *, warn: Callable[[str], None]) -> list[Shard]:
    """The shards of DATA when some input is a URL (local paths among them are read as
    ``file://``); sorted by name, as :func:`distprompt.read.shards.discover_shards` returns them.

    Raises:
        InputError: A backend is missing, nothing is at a URL, inputs mix filesystems, or no
            shard matches.
    """
    urls = [spec if is_url(spec) else Path(spec).absolute().as_uri() for spec in specs]
    systems = [_filesystem(url)[0] for url in urls]
    protocols = {fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0] for fs in systems}
    if len(protocols) > 1:
        raise InputError(
            f"{', '.join(specs)}: expected DATA on one filesystem, found {len(protocols)} "
            f"({', '.join(sorted(protocols))}); export each filesystem's shards separately"
        )
    found: dict[str, tuple[str, str, int]] = {}  # url -> (path in fs, name, size)
    for url, fs in zip(urls, systems, strict=True):
        for path, name, size in _discover_one(url, warn=warn):
            found.setdefault(fs.unstrip_protocol(path), (path, name, size))
    if len(specs) > 1 and found:
        root = posixpath.commonpath([posixpath.dirname(p) for p, _, _ in found.values()])
        found = {u: (p, posixpath.relpath(p, root), n) for u, (p, _, n) in found.items()}
    shards = sorted(
        (Shard(path=Path(p), name=name, size=size, url=u) for u, (p, name, size) in found.items()),
        key=lambda s: s.name,
    )
    if not shards:
        raise InputError(
            f"{', '.join(specs)}: expected shards named {SHARD_PATTERNS}, "
            "found none; check the URL or the glob"
        )
    return shards


def _discover_one(url: str, *, warn: Callable[[str], None]) -> list[tuple[str, str, int]]:
    fs, path = _filesystem(url)
    path = path.rstrip("/") or path

    def below(top: str, root: str) -> list[tuple[str, str, int]]:
        out = []
        for p, info in sorted(fs.find(top, detail=True).items()):
            if info.get("type") != "directory" and is_shard_file(Path(p)):
                out.append((p, posixpath.relpath(p, root), int(info.get("size") or 0)))
        if not out:
            warn(f"{url}: a folder without any {SHARD_PATTERNS} shard, ignored")
        return out

    try:
        if globlib.has_magic(path):
            fixed = []
            for part in path.split("/"):
                if globlib.has_magic(part):
                    break
                fixed.append(part)
            root = "/".join(fixed) or "/"
            out = []
            for p, info in sorted(fs.glob(path, detail=True).items()):
                if info.get("type") == "directory":
                    out.extend(below(p, root))
                elif is_shard_file(Path(p)):
                    out.append((p, posixpath.relpath(p, root), int(info.get("size") or 0)))
            return out
        if fs.isdir(path):
            return below(path, path)
        if fs.isfile(path):
            low = path.lower()
            for suffix in UNSUPPORTED_SUFFIXES:
                if low.endswith(suffix):
                    raise InputError(
                        f"{url}: expected a .jsonl, .jsonl.gz or .jsonl.zst shard, found a "
                        f"{suffix} file; decompress it (or recompress it with gzip or zstd) first"
                    )
            return [(path, posixpath.basename(path), int(fs.size(path) or 0))]
    except InputError:
        raise
    except (OSError, PermissionError) as exc:
        raise InputError(
            f"{url}: expected a readable folder or file, found {exc.strerror or exc}; check the "
            "URL and the credentials of this machine"
        ) from exc
    raise InputError(
        f"{url}: expected a folder, a glob or a shard file, found nothing at that URL; check it"
    )
