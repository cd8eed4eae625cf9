"""Discover the shards of DATA: a folder walked in sorted order (``tokenized_data.*`` files
when present, else every ``*.jsonl*``; Parquet and Arrow files too, never mixed with JSON Lines
unless ``glob`` chooses), files named one by one, or fsspec URLs. Broken symlinks, loops and
unreadable folders are refused; files that are not shards are listed once as ignored (see
:mod:`distprompt.read.shards` for how their lines are read).
"""

from __future__ import annotations

import errno
import glob as globlib
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from distprompt.errors import InputError
from distprompt.read.table import import_arrow, is_table
from distprompt.records import (
    SHARD_PATTERNS,
    SHARD_SUFFIXES,
    TABLE_SUFFIXES,
    UNSUPPORTED_SUFFIXES,
    Shard,
    is_shard_file,
)

__all__ = ["SHARD_NAMES", "ShardSet", "discover_shards", "find_shards", "refuse_mixed"]

logger = logging.getLogger("distprompt.read.shards")


#: File names of the shards a prepared dataset folder holds: only these are read when present.
SHARD_NAMES = tuple(f"tokenized_data{s}" for s in (*SHARD_SUFFIXES, *TABLE_SUFFIXES))


@dataclass(frozen=True, slots=True)
class ShardSet:
    """What discovery found: the shards to read and the ``*.jsonl*`` files it left out.

    Attributes:
        shards: The shards, sorted by name.
        ignored: Names (relative to their DATA folder, with ``/``) of the ``*.jsonl*`` files
            under a DATA folder that are not read: beside ``tokenized_data.*`` shards, or not
            matched by ``glob``. Sorted.
    """

    shards: list[Shard]
    ignored: tuple[str, ...] = ()


def discover_shards(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    warn: Callable[[str], None] | None = None,
    glob: str | None = None,
) -> list[Shard]:
    """List the shards DATA names, in sorted order (:func:`find_shards` without the ignored list).

    Example:
        >>> discover_shards("data_samples/prepared")[0].name  # doctest: +SKIP
        'A1_deepswekimi/tokenized_data.jsonl'
    """
    return find_shards(data, warn=warn, glob=glob).shards


def find_shards(
    data: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    warn: Callable[[str], None] | None = None,
    glob: str | None = None,
) -> ShardSet:
    """List the shards DATA names, in sorted order, and the files of its folders left out.

    In a DATA folder (searched recursively), the shards are the ``tokenized_data.jsonl``
    (``.gz``, ``.zst``) files when there is any; the other ``*.jsonl*`` files are ignored and
    named once in a warning. A folder without ``tokenized_data.*`` files is read for every
    ``*.jsonl``, ``*.jsonl.gz`` and ``*.jsonl.zst`` file. A glob or a file given as DATA is read
    as given.

    Args:
        data: A directory, a glob pattern, a file, or a list of those.
        warn: Called with each warning (ignored files, a folder without shards, a directory
            symlink loop); logged on ``distprompt.read.shards`` when None.
        glob: Chooses the shards of each DATA folder explicitly instead: a pattern matched
            against the path relative to the folder (``*`` and ``?`` stay within a folder, ``**``
            spans folders; a pattern without ``/`` is matched against file names), e.g.
            ``"*/tokenized_data.jsonl"`` or ``"*.jsonl.zst"``. Only ``*.jsonl*``, ``*.parquet``
            and ``*.arrow`` files qualify.

    Returns:
        The :class:`ShardSet`: shards sorted by their relative name (relative to the directory,
        the glob's fixed prefix, or, for files, their common parent) and the ignored names.

    Raises:
        InputError: Nothing exists at DATA, no shard matches, a folder cannot be listed, a
            shard-named symlink is broken or loops, or a file is compressed in a format distprompt
            does not read.

    Example:
        >>> find_shards("data_samples").ignored  # doctest: +SKIP
        ()
    """
    say = warn if warn is not None else (lambda msg: logger.warning("%s", msg))
    specs = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    if not specs:
        raise InputError("expected DATA (a directory, a glob or files), found nothing")
    from distprompt.read.remote import discover_urls, is_url

    if any(is_url(str(spec)) for spec in specs):
        if glob is not None:
            raise InputError(
                "expected --glob with a local DATA folder, found URLs; put the pattern in the URL "
                "instead (e.g. s3://bucket/prepared/*/tokenized_data.jsonl)"
            )
        listed = discover_urls([str(spec) for spec in specs], warn=say)
        # The same rule as for local folders: tokenized_data.* files, when there are any.
        keep = [s for s in listed if s.name.rpartition("/")[2] in SHARD_NAMES] or listed
        dropped = sorted(s.name for s in listed if s not in keep)
        refuse_mixed([s.name for s in listed], ", ".join(str(s) for s in specs), url=True)
        if any(is_table(s.name) for s in keep):
            import_arrow()
        if dropped:
            shown = ", ".join(dropped[:5]) + (", ..." if len(dropped) > 5 else "")
            say(
                f"{data}: read only the {len(keep)} tokenized_data.* shard(s); ignored "
                f"{len(dropped)} other *.jsonl file(s): {shown}"
            )
        return ShardSet(shards=keep, ignored=tuple(dropped))

    if glob is not None and not glob.strip():
        raise InputError(
            "expected --glob to be a pattern such as '*/tokenized_data.jsonl', found ''"
        )
    pattern = _glob_regex(glob) if glob is not None else None
    found: dict[Path, Shard] = {}
    ignored: list[str] = []
    for spec in specs:
        for shard in _discover_one(
            str(spec), warn=say, pattern=pattern, glob=glob, ignored=ignored
        ):
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
    if any(is_table(s.name) for s in shards):
        import_arrow()  # here, in the caller's thread, before the run starts others
    if not shards:
        if glob is not None:
            raise InputError(
                f"{data}: expected {SHARD_PATTERNS} files matching --glob "
                f"{glob!r}, found none ({len(ignored)} other *.jsonl file(s)); check the pattern "
                "(relative to the DATA folder)"
            )
        raise InputError(
            f"{data}: expected shards named {SHARD_PATTERNS}, found none; "
            "check the path or the glob"
        )
    return ShardSet(shards=shards, ignored=tuple(sorted(set(ignored))))


def _glob_regex(glob: str) -> re.Pattern[str]:
    """A ``--glob`` pattern as a regex over relative paths (``**`` spans folders)."""
    pat = glob.strip().lstrip("/")
    if pat.startswith("./"):
        pat = pat[2:]
    if "/" not in pat:
        pat = "**/" + pat  # a bare name pattern matches at any depth
    out, i = [], 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and "]" in pat[i + 2 :]:
            j = pat.index("]", i + 2)
            body = pat[i + 1 : j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _choose(
    files: list[Shard],
    *,
    top: Path,
    spec: str,
    pattern: re.Pattern[str] | None,
    glob: str | None,
    ignored: list[str],
    warn: Callable[[str], None],
) -> Iterator[Shard]:
    """The shards of one DATA folder: ``glob``'s choice, else ``tokenized_data.*`` if any."""
    if pattern is None:
        refuse_mixed([f.name for f in files], spec)
    if pattern is not None:
        keep = [f for f in files if pattern.match(_rel(f.path, top))]
        why = f"--glob {glob!r} chose {len(keep)} shard(s)"
    else:
        keep = [f for f in files if f.path.name in SHARD_NAMES]
        why = f"read only the {len(keep)} tokenized_data.* shard(s)"
        if not keep:
            keep = files
    chosen = {id(f) for f in keep}
    left = [f.name for f in files if id(f) not in chosen]
    if left:
        ignored.extend(left)
        shown = ", ".join(left[:5]) + (", ..." if len(left) > 5 else "")
        hint = "" if pattern is not None else "; pass --glob PATTERN to choose the files"
        warn(f"{spec}: {why}; ignored {len(left)} other *.jsonl file(s): {shown}{hint}")
    yield from keep


def refuse_mixed(names: Sequence[str], spec: str, *, url: bool = False) -> None:
    """Refuse a DATA folder whose shards are both JSON Lines and tables (Parquet, Arrow).

    Raises:
        InputError: It holds both kinds.
    """
    tables = [n for n in names if is_table(n)]
    if tables and len(tables) < len(names):
        lines = [n for n in names if not is_table(n)]
        raise InputError(
            f"{spec}: expected shards of one format, found {len(lines)} JSON Lines file(s) "
            f"({lines[0]}, ...) and {len(tables)} Parquet/Arrow file(s) ({tables[0]}, ...); the "
            "same rows in both formats would count twice — "
            + (
                "put the pattern in the URL (e.g. …/*/*.parquet)"
                if url
                else "pass --glob '*.parquet' (or '*.jsonl', '*.arrow') to choose"
            )
            + ", or name the files"
        )


def _discover_one(
    spec: str,
    *,
    warn: Callable[[str], None],
    pattern: re.Pattern[str] | None = None,
    glob: str | None = None,
    ignored: list[str] | None = None,
) -> Iterator[Shard]:
    path = Path(spec)
    left: list[str] = ignored if ignored is not None else []

    def folder(top: Path, root: Path, named: str) -> Iterator[Shard]:
        files = list(_walk(top, root=root, warn=warn))
        return _choose(
            files, top=top, spec=named, pattern=pattern, glob=glob, ignored=left, warn=warn
        )

    if path.is_dir():
        yield from folder(path, path, spec)
        return
    if path.is_file():
        _check_suffix(path)
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
            if p.is_dir():
                yield from folder(p, root, m)
            elif is_shard_file(p):
                _check_file(p, root)
                yield Shard(path=p, name=p.relative_to(root).as_posix(), size=p.stat().st_size)
        return
    if path.is_symlink():
        raise InputError(
            f"{spec}: expected a shard file, found a symbolic link {_link_problem(path)}; "
            "fix or remove the link"
        )
    raise InputError(
        f"{spec}: expected a directory, a glob or a shard file, found nothing at that path; "
        "check the path"
    )


def _walk(top: Path, *, root: Path, warn: Callable[[str], None]) -> Iterator[Shard]:
    """Shards below ``top`` (named relative to ``root``), following directory symlinks once."""

    def unreadable(exc: OSError) -> None:
        raise InputError(
            f"{exc.filename}: expected a readable folder, found {exc.strerror or exc}; fix its "
            "permissions or leave it out of DATA"
        ) from exc

    seen_dirs: set[tuple[int, int]] = set()
    with_shards: set[Path] = set()
    others: dict[Path, list[str]] = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True, onerror=unreadable):
        here = Path(dirpath)
        st = os.stat(dirpath)
        ident = (st.st_dev, st.st_ino)
        if ident in seen_dirs:  # a symlink loop (or a second link to a folder): walk it once
            warn(f"{_rel(here, root)}: a link to a folder already read (symlink loop?), skipped")
            dirnames[:] = []
            continue
        seen_dirs.add(ident)
        dirnames.sort()
        others[here] = []
        for fn in sorted(filenames):
            p = here / fn
            if not is_shard_file(p):
                if not fn.startswith("."):
                    others[here].append(fn)
                continue
            _check_file(p, root)
            with_shards.add(here)
            yield Shard(path=p, name=_rel(p, root), size=p.stat().st_size)
    # Folders without a shard anywhere below: name the topmost ones (a source folder whose files
    # have the wrong suffix is the usual mistake); hidden folders are not worth a warning.
    covered = {a for d in with_shards for a in (d, *d.parents)}
    for d in sorted(others):
        if d in covered or d.parent not in covered or d == top:
            continue
        if any(part.startswith(".") for part in d.relative_to(top).parts):
            continue
        files = others[d]
        held = (
            f"it holds {len(files)} other file(s): {', '.join(files[:3])}"
            + (", ..." if len(files) > 3 else "")
            if files
            else "no file directly in it"
        )
        warn(f"{_rel(d, root)}/: a folder without any {SHARD_PATTERNS} shard ({held}), ignored")


def _rel(p: Path, root: Path) -> str:
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()


def _link_problem(p: Path) -> str:
    try:
        os.stat(p)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "that loops"
        if exc.errno == errno.ENOENT:
            return f"to a missing target ({os.readlink(p)})"
        return f"that cannot be followed ({exc.strerror or exc})"
    return "to something that is not a file"


def _check_file(p: Path, root: Path) -> None:
    """Refuse a shard-named entry that cannot be read as a file, rather than skip it silently."""
    if p.is_file():
        return
    name = _rel(p, root)
    if p.is_symlink():
        raise InputError(
            f"{name}: expected a shard file, found a symbolic link {_link_problem(p)}; "
            "fix or remove the link"
        )
    raise InputError(
        f"{name}: expected a shard file, found something else (a pipe, socket or device); "
        "remove it or rename it"
    )


def _check_suffix(p: Path) -> None:
    low = p.name.lower()
    for suffix in UNSUPPORTED_SUFFIXES:
        if low.endswith(suffix):
            raise InputError(
                f"{p}: expected a .jsonl, .jsonl.gz or .jsonl.zst shard, found a {suffix} file; "
                "decompress it (or recompress it with gzip or zstd) first"
            )
