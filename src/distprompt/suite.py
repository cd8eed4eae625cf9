"""The :class:`Suite`: selected items plus the manifest, saved and loaded as a folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from distprompt._io import atomic_write_bytes, atomic_write_lines
from distprompt.errors import InputError, OutputError
from distprompt.records import SuiteItem

__all__ = ["MANIFEST_NAME", "SUITE_NAME", "Suite", "prepare_out_dir"]

SUITE_NAME = "suite.jsonl"
MANIFEST_NAME = "manifest.json"
_JSON_OPTS = orjson.OPT_SORT_KEYS


class Suite:
    """A benchmark prompt suite: items (iterable, ``len``) and the manifest that explains them.

    Example:
        >>> suite = build_suite("data_samples/prepared", tokenizer=tok)  # doctest: +SKIP
        >>> suite.save("out")  # doctest: +SKIP
        >>> len(Suite.load("out")) == len(suite)  # doctest: +SKIP
        True
    """

    def __init__(self, items: Sequence[SuiteItem], manifest: dict[str, Any]) -> None:
        self.items: tuple[SuiteItem, ...] = tuple(items)
        self.manifest = manifest

    def __iter__(self) -> Iterator[SuiteItem]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> SuiteItem:
        return self.items[i]

    def __repr__(self) -> str:
        sources = sorted({it.source for it in self.items})
        return f"Suite({len(self.items)} items from {len(sources)} sources)"

    @property
    def report(self) -> dict[str, Any]:
        """Per-source figures of the manifest (counts, warnings)."""
        return {
            "sources": self.manifest.get("sources", {}),
            "warnings": self.manifest.get("warnings", []),
        }

    def to_polars(self) -> Any:
        """One row per item; nested fields (provenance, messages) as structs/JSON strings."""
        import polars as pl

        rows = []
        for it in self.items:
            d = it.to_dict()
            prov = d.pop("provenance")
            d["shard"], d["line"], d["offset"] = prov["shard"], prov["line"], prov["offset"]
            d["messages"] = orjson.dumps(d["messages"]).decode() if d["messages"] else None
            d["tools"] = orjson.dumps(d["tools"]).decode() if d["tools"] else None
            rows.append(d)
        return pl.DataFrame(rows, infer_schema_length=None)

    def suite_lines(self) -> list[bytes]:
        return [orjson.dumps(it.to_dict()) for it in self.items]

    def manifest_bytes(self) -> bytes:
        return orjson.dumps(self.manifest, option=_JSON_OPTS | orjson.OPT_INDENT_2) + b"\n"

    def save(
        self,
        out: str | os.PathLike[str],
        *,
        formats: Sequence[str] | None = None,
        overwrite: bool = False,
    ) -> Path:
        """Write the suite folder: ``suite.jsonl``, ``manifest.json`` and client exports.

        The folder is built beside ``out`` and renamed into place, so an interrupted save never
        leaves a suite that looks complete.

        Args:
            out: Output folder; refused when it exists and is not empty, unless ``overwrite``.
            formats: Client formats to write (default: all, see :data:`distprompt.export.FORMATS`).
            overwrite: Replace an existing non-empty folder.

        Raises:
            OutputError: ``out`` exists and is not empty, or cannot be written.
        """
        from distprompt import export

        out_path = Path(out)
        fmts = tuple(export.FORMATS if formats is None else formats)
        with prepare_out_dir(out_path, overwrite=overwrite) as tmp:
            atomic_write_lines(tmp / SUITE_NAME, self.suite_lines())
            files = export.write_exports(
                self.items,
                tmp,
                formats=fmts,
                tokenizer_name=str(self.manifest.get("tokenizer", {}).get("name", "")),
            )
            manifest = dict(self.manifest)
            manifest["files"] = {k: sorted(v) for k, v in sorted(files.items())}
            self.manifest = manifest
            # The manifest goes last: its presence marks a complete suite.
            atomic_write_bytes(tmp / MANIFEST_NAME, self.manifest_bytes())
        return out_path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Suite:
        """Read a suite folder written by :meth:`save`.

        Raises:
            InputError: No complete suite at ``path``.
        """
        p = Path(path)
        if not (p / MANIFEST_NAME).is_file() or not (p / SUITE_NAME).is_file():
            raise InputError(
                f"{p}: expected a suite folder with {SUITE_NAME} and {MANIFEST_NAME}, found "
                "none; pass the --out folder of a finished export"
            )
        manifest = orjson.loads((p / MANIFEST_NAME).read_bytes())
        items = []
        with open(p / SUITE_NAME, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        items.append(SuiteItem.from_dict(orjson.loads(line)))
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                        raise InputError(
                            f"{p / SUITE_NAME}:{n}: expected a suite item, found {exc}"
                        ) from exc
        return cls(items, manifest)


@contextlib.contextmanager
def prepare_out_dir(out: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield an empty temp folder beside ``out``; on success it replaces ``out``.

    Raises:
        OutputError: ``out`` is a non-empty folder (without ``overwrite``), a file, or unwritable.
    """
    if out.exists():
        if not out.is_dir():
            raise OutputError(
                f"{out}: expected an output folder, found a file; choose another --out"
            )
        if any(out.iterdir()) and not overwrite:
            raise OutputError(
                f"{out}: expected an empty or new output folder, found files in it; "
                "pass --overwrite to replace it, or choose another --out"
            )
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise OutputError(
            f"{parent}: expected a writable folder, found {exc.strerror or exc}; "
            "choose another --out or fix its permissions"
        ) from exc
    try:
        yield tmp
        old: Path | None = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
            os.replace(out, old / "x")
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
