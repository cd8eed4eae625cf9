"""The :class:`Suite`: selected items plus the manifest, saved and loaded as a folder."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from distprompt._io import atomic_write_bytes, atomic_write_lines, umask
from distprompt.errors import DistpromptError, InputError, OutputError
from distprompt.records import SuiteItem

if TYPE_CHECKING:
    from distprompt.report import Report

logger = logging.getLogger("distprompt.suite")

__all__ = ["MANIFEST_NAME", "SUITE_NAME", "Suite", "check_out_dir", "prepare_out_dir"]

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

    def __init__(
        self,
        items: Sequence[SuiteItem],
        manifest: dict[str, Any],
        *,
        report: Report | None = None,
    ) -> None:
        self.items: tuple[SuiteItem, ...] = tuple(items)
        self.manifest = manifest
        self._report = report
        # The tokenizer build_suite loaded, for save (a second load costs seconds).
        self._tokenizer: Any = None

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
    def report(self) -> Report | None:
        """The representativeness report (:class:`distprompt.report.Report`): suite vs corpus
        and vs uniform random, per source and overall; None for a suite loaded without one."""
        return self._report

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
        tokenizer: Any = None,
        temperature: float = 0.0,
    ) -> Path:
        """Write the suite folder: ``suite.jsonl``, client exports, the report files
        (``report.json``, ``report.md``, PNG plots, ``report.html``) and ``manifest.json``.

        The folder is built beside ``out`` and renamed into place, so an interrupted save never
        leaves a suite that looks complete.

        Args:
            out: Output folder; refused when it exists and is not empty, unless ``overwrite``.
            formats: Client formats to write (default: all, see :data:`distprompt.export.FORMATS`).
            overwrite: Replace an existing non-empty folder.
            tokenizer: The suite's tokenizer, for RUN.md's per-client ``sharegpt.json`` counts
                and AIPerf's turn lengths; by default the manifest's tokenizer is loaded again
                (when it cannot be, RUN.md says the counts are unknown).
            temperature: Sampling temperature of the client files and commands (0: greedy).

        Raises:
            OutputError: ``out`` exists and is not empty, or cannot be written.
        """
        from distprompt import export

        out_path = Path(out)
        fmts = tuple(export.FORMATS if formats is None else formats)
        tok_name = str(self.manifest.get("tokenizer", {}).get("name", ""))
        with prepare_out_dir(out_path, overwrite=overwrite) as tmp:
            atomic_write_lines(tmp / SUITE_NAME, self.suite_lines())
            files = export.write_exports(
                self.items,
                tmp,
                formats=fmts,
                tokenizer_name=tok_name,
                tokenizer=(
                    tokenizer
                    if tokenizer is not None
                    else self._tokenizer
                    if self._tokenizer is not None
                    else _reload_tokenizer(tok_name)
                ),
                temperature=temperature,
            )
            failed = _failed_verdict(self.manifest)
            if failed is not None and "run_md" in files:
                _put_on_top(tmp / files["run_md"][0], failed)
            if self._report is not None:
                files["report"] = self._report.write(tmp)
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
        from distprompt.report import REPORT_JSON, Report

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
        report = None
        if (p / REPORT_JSON).is_file():
            report = Report.load(p / REPORT_JSON)
        return cls(items, manifest, report=report)


def _failed_verdict(manifest: dict[str, Any]) -> list[str] | None:
    """Markdown lines telling that the tokenizer checks failed, or None when they passed."""
    check = manifest.get("tokenizer_check") or {}
    if check.get("passed", True):
        return None
    lines = [
        "> **Tokenizer check FAILED.** This suite was written with `--no-tokenizer-check` "
        "although the tokenizer does not match the data: the prompts may be garbage. "
        "The verdict (`manifest.json`, `tokenizer_check`):",
        ">",
    ]
    lines += [f"> - {m}" for m in str(check.get("mismatch") or "").splitlines()]
    return lines


def _put_on_top(path: Path, block: list[str]) -> None:
    """Insert ``block`` below the first heading of a Markdown file (written atomically)."""
    text = path.read_text(encoding="utf-8").split("\n")
    at = 1 if text and text[0].startswith("#") else 0
    out = [*text[:at], "", *block, *text[at:]]
    atomic_write_bytes(path, "\n".join(out).encode("utf-8"))


def check_out_dir(out: Path, *, overwrite: bool) -> None:
    """Refuse an output folder that cannot be used, before any work is done.

    ``--overwrite`` replaces only a previous distprompt output (a folder holding
    ``manifest.json``): a mistyped ``--out`` (the corpus, a home folder) is never deleted.

    Raises:
        OutputError: ``out`` is a file; a non-empty folder (without ``overwrite``); a folder that
            is not a distprompt output, or holds the working directory (with ``overwrite``); or
            its parent is not a folder.
    """
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise OutputError(
                f"{out}: expected an output folder, found a file; choose another --out"
            )
        if any(out.iterdir()):
            if not overwrite:
                raise OutputError(
                    f"{out}: expected an empty or new output folder, found files in it; "
                    "pass --overwrite to replace it, or choose another --out"
                )
            if not (out / MANIFEST_NAME).is_file():
                raise OutputError(
                    f"{out}: expected a previous distprompt output to replace (a folder with "
                    f"{MANIFEST_NAME}), found a folder of other files; --overwrite never deletes "
                    "those — choose another --out or empty it yourself"
                )
            cwd = Path.cwd().resolve()
            if out.resolve() == cwd or out.resolve() in cwd.parents:
                raise OutputError(
                    f"{out}: expected an output folder outside the working directory, found it "
                    "holds the working directory; choose another --out"
                )
    # The first existing ancestor must be a folder, or nothing can be created below it.
    anc = out.absolute().parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise OutputError(
            f"{out}: expected a folder to write into, found {anc} is a file; choose another --out"
        )


@contextlib.contextmanager
def prepare_out_dir(out: Path, *, overwrite: bool) -> Iterator[Path]:
    """Yield an empty temp folder beside ``out``; on success it replaces ``out``.

    Whatever goes wrong (an error, a full disk, Ctrl-C, SIGTERM), the temp folder is removed and
    ``out`` is left as it was: a folder named ``out`` is always a finished suite.

    Raises:
        OutputError: ``out`` cannot be used (see :func:`check_out_dir`) or written.
    """
    out = Path(out)
    check_out_dir(out, overwrite=overwrite)
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise OutputError(
            f"{parent}: expected a writable folder, found {exc.strerror or exc}; "
            "choose another --out or fix its permissions"
        ) from exc
    old: Path | None = None
    try:
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it private (0700)
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=parent))
            os.replace(out, old / "x")
        os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "x").exists() and not out.exists():
            os.replace(old / "x", out)  # interrupted between the two renames: put it back
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, DistpromptError):
            raise OutputError(
                f"{out}: could not be written ({exc.strerror or exc}); check free disk space "
                "and permissions, then run again"
            ) from exc
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _reload_tokenizer(name: str) -> Any:
    """The suite's tokenizer loaded again by name, or None (logged) when it cannot be."""
    if not name:
        return None
    from distprompt.decode import load_tokenizer

    try:
        return load_tokenizer(name)[0]
    except (DistpromptError, OSError, ValueError) as exc:
        logger.warning("tokenizer %r not loadable (%s): RUN.md drop counts unknown", name, exc)
        return None
