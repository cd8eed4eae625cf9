"""The :class:`Suite`: selected items plus the manifest, saved and loaded as a folder."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from distprompt.errors import DistpromptError, InputError, api_spelling
from distprompt.manifest import Manifest
from distprompt.records import SuiteItem
from distprompt.write.formats import FORMATS
from distprompt.write.out_dir import (
    MANIFEST_NAME,
    atomic_write_bytes,
    atomic_write_lines,
    prepare_out_dir,
)
from distprompt.write.render import format_table

if TYPE_CHECKING:
    from distprompt.write.report import Report

logger = logging.getLogger("distprompt.write.suite")

__all__ = ["SUITE_NAME", "SUITE_PARQUET", "Suite"]

SUITE_NAME = "suite.jsonl"
#: The same items as :data:`SUITE_NAME`, as a Parquet table with typed columns (see
#: :meth:`Suite.to_arrow` and docs/formats.md).
SUITE_PARQUET = "suite.parquet"
#: Item fields whose values vary in shape (chat turns, tool schemas, template switches,
#: readings): one JSON text each in ``suite.parquet``, as ``suite.jsonl`` writes them.
JSON_COLUMNS = ("ambiguities", "messages", "tools", "chat_template_kwargs")
_JSON_OPTS = orjson.OPT_SORT_KEYS


class Suite:
    """A benchmark prompt suite: items (iterable, ``len``) and the manifest that explains them.

    ``manifest`` is a :class:`~distprompt.manifest.Manifest` (a mapping is read as
    ``manifest.json``'s content). ``tokenizer`` is the one the suite was built with
    (:func:`build_suite` passes it), kept so that :meth:`save` need not load it again; ``plots``
    returns the report's PNGs when they are drawn elsewhere (:func:`build_suite` draws them in
    worker processes on a large corpus).

    Example:
        >>> suite = build_suite("data_samples/prepared", tokenizer=tok)  # doctest: +SKIP
        >>> suite.save("out")  # doctest: +SKIP
        >>> len(Suite.load("out")) == len(suite)  # doctest: +SKIP
        True
    """

    def __init__(
        self,
        items: Sequence[SuiteItem],
        manifest: Manifest | Mapping[str, Any],
        *,
        report: Report | None = None,
        tokenizer: Any = None,
        plots: Callable[[], Mapping[str, bytes]] | None = None,
    ) -> None:
        self.items: tuple[SuiteItem, ...] = tuple(items)
        # A mapping is read as manifest.json's content (a caller's own, an older version's).
        self.manifest = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
        self._report = report
        # The report's plots when they are being drawn elsewhere (build_suite draws them in
        # worker processes on a large corpus): called by save, after the other files.
        self._plots = plots
        # The tokenizer build_suite loaded, for save (a second load costs seconds).
        self._tokenizer = tokenizer

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
        """The representativeness report (:class:`distprompt.write.report.Report`): suite vs corpus
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

    def to_arrow(self) -> Any:
        """The items as a ``pyarrow.Table``: the columns of ``suite.parquet``.

        One column per key of a ``suite.jsonl`` item, in its order: strings, int64 counts,
        float64 ``weight``, ``provenance`` a struct (``shard``, ``line``, ``offset``),
        ``prompt_ids``/``response_ids`` lists of int32 (int64 for ids of 2**31 or more), and
        :data:`JSON_COLUMNS` as JSON text (null where the item has None).

        Example:
            >>> suite.to_arrow().column("prompt_ids").type  # doctest: +SKIP
            ListType(list<item: int32>)
        """
        import pyarrow as pa

        ids = [i for it in self.items for i in (*it.prompt_ids, *(it.response_ids or ()))]
        id_type = pa.int32() if not ids or max(ids) < 2**31 else pa.int64()
        text, count = pa.string(), pa.int64()
        provenance = pa.struct([("shard", text), ("line", count), ("offset", count)])
        types = {
            "id": text, "source": text, "prompt": text, "n_prompt_tokens": count,
            "n_response_tokens": count, "max_tokens": count, "cluster": count,
            "cluster_size": count, "weight": pa.float64(), "stratum": text, "duplicates": count,
            "provenance": provenance, "fidelity": text, "fidelity_reason": text,
            "structure": text, "ambiguities": text, "messages": text, "tools": text,
            "chat_template_kwargs": text, "response": text, "prompt_ids": pa.list_(id_type),
            "response_ids": pa.list_(id_type),
        }  # fmt: skip
        rows = [it.to_dict() for it in self.items]
        for d in rows:
            for k in JSON_COLUMNS:
                d[k] = orjson.dumps(d[k]).decode() if d[k] is not None else None
        schema = pa.schema([(k, t) for k, t in types.items()])
        return pa.Table.from_pylist(rows, schema=schema)

    def parquet_bytes(self) -> bytes:
        """``suite.parquet``: :meth:`to_arrow` written with zstd, one row group."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        table = self.to_arrow()
        pq.write_table(table, sink, compression="zstd", row_group_size=max(1, table.num_rows))
        return bytes(sink.getvalue().to_pybytes())

    def to_hf(self) -> Any:
        """The items as a ``datasets.Dataset`` (the columns of :meth:`to_arrow`).

        Example:
            >>> ds = suite.to_hf()  # doctest: +SKIP
            >>> ds.filter(lambda r: r["source"] == "glaive").num_rows  # doctest: +SKIP
            20
        """
        import datasets

        return datasets.Dataset(self.to_arrow())

    @classmethod
    def from_hf(cls, dataset: Any, manifest: Manifest | Mapping[str, Any] | None = None) -> Suite:
        """A suite from a ``datasets.Dataset`` (or ``pyarrow.Table``) with the columns of
        :meth:`to_arrow`, e.g. ``suite.parquet`` loaded with ``datasets.load_dataset`` and
        filtered; ``manifest`` defaults to an empty one.

        Raises:
            InputError: A row is not a suite item.
        """
        # Dataset.to_list applies a filter's or a select's indices (its .data would not)
        rows = dataset.to_list() if hasattr(dataset, "to_list") else dataset.to_pylist()
        items = []
        for n, d in enumerate(rows, 1):
            try:
                for k in JSON_COLUMNS:
                    if isinstance(d.get(k), str):
                        d[k] = orjson.loads(d[k])
                items.append(SuiteItem.from_dict(d))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise InputError(
                    f"row {n}: expected a suite item (the columns of suite.parquet), found "
                    f"{type(exc).__name__}: {exc}; pass a table Suite.to_hf() wrote"
                ) from exc
        return cls(items, Manifest.empty() if manifest is None else manifest)

    def suite_lines(self) -> list[bytes]:
        return [orjson.dumps(it.to_dict()) for it in self.items]

    def manifest_bytes(self) -> bytes:
        return (
            orjson.dumps(self.manifest.to_dict(), option=_JSON_OPTS | orjson.OPT_INDENT_2) + b"\n"
        )

    @api_spelling
    def save(
        self,
        out: str | os.PathLike[str],
        *,
        formats: Sequence[str] | None = None,
        overwrite: bool = False,
        tokenizer: Any = None,
        temperature: float = 0.0,
        ignore_eos: bool = False,
    ) -> Path:
        """Write the suite folder: ``suite.jsonl`` (and the same items as ``suite.parquet``),
        client exports, the report files
        (``report.json``, ``report.md``, PNG plots, ``report.html``) and ``manifest.json``.

        The folder is built beside ``out`` and renamed into place, so an interrupted save never
        leaves a suite that looks complete.

        Args:
            out: Output folder; refused when it exists and is not empty, unless ``overwrite``.
            formats: Client formats to write (default: all, see
            :data:`distprompt.write.formats.FORMATS`).
            overwrite: Replace an existing non-empty folder.
            tokenizer: The suite's tokenizer, for RUN.md's per-client ``sharegpt.json`` counts
                and AIPerf's turn lengths; by default the one :func:`build_suite` loaded, else
                the manifest's tokenizer is loaded again (when it cannot be, RUN.md says the
                counts are unknown).
            temperature: Sampling temperature of the client files and commands (0: greedy).
            ignore_eos: Ask the clients to generate ``max_tokens`` past EOS (forced lengths).

        Raises:
            OutputError: ``out`` exists and is not empty, or cannot be written.
        """
        from distprompt.write import export

        started = time.perf_counter()
        waited = 0.0
        out_path = Path(out)
        fmts = tuple(FORMATS if formats is None else formats)
        tok_name = self.manifest.tokenizer.name
        tok = tokenizer if tokenizer is not None else self._tokenizer
        with prepare_out_dir(out_path, overwrite=overwrite) as tmp:
            atomic_write_lines(tmp / SUITE_NAME, self.suite_lines())
            atomic_write_bytes(tmp / SUITE_PARQUET, self.parquet_bytes())
            # what RUN.md says first, below its heading: rows the pass skipped, a failed verdict
            notices = [
                b
                for b in (_skipped_rows(self.manifest), _failed_verdict(self.manifest))
                if b is not None
            ]
            files = export.write_exports(
                self.items,
                tmp,
                formats=fmts,
                tokenizer_name=tok_name,
                tokenizer=tok if tok is not None else _reload_tokenizer(tok_name),
                temperature=temperature,
                ignore_eos=ignore_eos,
                notices=notices,
            )
            if self._report is not None:
                waited = time.perf_counter()
                pngs = self._plots() if self._plots is not None else None
                waited = time.perf_counter() - waited
                files["report"] = self._report.write(tmp, pngs=pngs)
            self.manifest = self.manifest.with_files(
                {k: tuple(sorted(v)) for k, v in sorted(files.items())}
            )
            # The manifest goes last: its presence marks a complete suite.
            atomic_write_bytes(tmp / MANIFEST_NAME, self.manifest_bytes())
        logger.info(
            "saved %s in %.1f s (%.1f s of it waiting for the plots drawn elsewhere)",
            out_path,
            time.perf_counter() - started,
            waited,
        )
        return out_path

    def summary(self, out: str | os.PathLike[str] | None = None) -> str:
        """What ``distprompt export`` prints: the per-source table, the report's verdict and
        (with ``out``) the line naming the folder, with any caveat a column would hide.

        Example:
            >>> print(suite.summary("out"))  # doctest: +SKIP
        """
        lines = [_summary_table(self.manifest)]
        if self._report is not None:
            lines.append(self._report.summary)
        if out is not None:
            lines.append(f"wrote {len(self)} items to {out}{_caveats(self.manifest)}")
        return "\n".join(lines)

    @classmethod
    @api_spelling
    def load(cls, path: str | os.PathLike[str]) -> Suite:
        """Read a suite folder written by :meth:`save`.

        Raises:
            InputError: No complete suite at ``path``.
        """
        from distprompt.write.report import REPORT_JSON, Report

        p = Path(path)
        if not (p / MANIFEST_NAME).is_file() or not (p / SUITE_NAME).is_file():
            raise InputError(
                f"{p}: expected a suite folder with {SUITE_NAME} and {MANIFEST_NAME}, found "
                "none; pass the --out folder of a finished export"
            )
        try:
            manifest = Manifest.from_dict(orjson.loads((p / MANIFEST_NAME).read_bytes()))
        except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
            raise InputError(
                f"{p / MANIFEST_NAME}: expected a distprompt manifest (a JSON object), found "
                f"{type(exc).__name__}: {exc}; pass the --out folder of a finished export"
            ) from exc
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


def _caveats(manifest: Manifest) -> str:
    """What the last line must not leave to a column: a failed check, a token-exact share < 100%."""
    out = []
    check = manifest.tokenizer_check
    if check is not None and check.passed is False:
        out.append("TOKENIZER CHECK FAILED (written with --no-tokenizer-check)")
    fid: dict[str, int] = {}
    for s in manifest.sources.values():
        for k, v in s.fidelity.items():
            fid[k] = fid.get(k, 0) + v
    n = sum(fid.values())
    exact = fid.get("tokens", 0)
    if n and exact < n:
        out.append(
            f"only {exact} of {n} items ({100.0 * exact / n:.0f}%) are token-exact; the others "
            "are listed in manifest.json fidelity_issues"
        )
    readings: dict[str, int] = {}
    for s in manifest.sources.values():
        for k, v in s.ambiguities.items():
            reading = k.rpartition(":")[2]
            readings[reading] = readings.get(reading, 0) + v
    if readings:
        said = {"user": "kept as user text", "system": "read as a system prompt by evidence"}
        kept = ", ".join(f"{v} {said.get(k, k)}" for k, v in sorted(readings.items(), reverse=True))
        out.append(
            f"{sum(readings.values())} ambiguous system/user turns ({kept}; see "
            "manifest.json sources.*.ambiguities)"
        )
    return f" — {'; '.join(out)}" if out else ""


def _summary_table(manifest: Manifest) -> str:
    head = (
        "source", "rows", "unique", "cands", "target", "selected", "take-all", "strata",
        "exact%", "turns%",
    )  # fmt: skip
    lines = [head]
    worst = 0.0
    designed = False
    for src, s in manifest.sources.items():
        strata = s.design.strata
        designed = designed or bool(strata)
        taken = str(strata.get("take-all", 0)) if strata else "-"
        by_len = sorted((k for k in strata if k.startswith("len")), key=lambda k: int(k[3:]))
        spread = "/".join(str(strata[k]) for k in by_len) or "-"
        res = s.design.residual
        for v in (res.rows, res.prompt_tokens, res.first_reply_tokens):
            worst = max(worst, abs(v or 0.0))
        fid = s.fidelity
        n = sum(fid.values())
        pct = f"{100.0 * fid.get('tokens', 0) / n:.0f}" if n else "-"
        # Share of items whose every turn was recognised (the rest are `flat` fallbacks).
        structure = s.structure
        n_st = sum(structure.values())
        turns = f"{100.0 * structure.get('turns', 0) / n_st:.0f}" if n_st else "-"
        uniq = f"{s.unique_prompts}" + ("" if s.unique_exact else "~")
        lines.append(
            (
                src,
                str(s.rows),
                uniq,
                str(s.candidates),
                str(s.target),
                str(s.selected),
                taken,
                spread,
                pct,
                turns,
            )
        )
    out = format_table(lines)
    out.append(
        "unique: distinct prompts; cands: unique prompts kept for selection (a uniform sample, "
        "at most --max-candidates); target: items asked for; exact%: items whose prompt "
        "decodes to text that re-encodes to the exact ids; turns%: items whose every chat turn "
        "was recognised (the rest are one flat message)"
    )
    if designed:
        out.append(
            "take-all: rows whose first reply alone holds a pick's share of the source's reply "
            "tokens (each stands for itself); strata: picks per first-reply length stratum, "
            "shortest first; weights = corpus rows, calibrated to each source's rows, prompt and "
            f"first-reply tokens (largest gap {100.0 * worst:.2g}%)"
        )
    skipped = manifest.counts.skipped
    if skipped:
        out.append("skipped rows: " + ", ".join(f"{k}={v}" for k, v in skipped.items()))
    return "\n".join(out)


def _failed_verdict(manifest: Manifest) -> list[str] | None:
    """Markdown lines telling that the tokenizer checks failed, or None when they passed."""
    check = manifest.tokenizer_check
    if check is None or check.passed:
        return None
    lines = [
        "> **Tokenizer check FAILED.** This suite was written with `--no-tokenizer-check` "
        "although the tokenizer does not match the data: the prompts may be garbage. "
        "The verdict (`manifest.json`, `tokenizer_check`):",
        ">",
    ]
    lines += [f"> - {m}" for m in (check.mismatch or "").splitlines()]
    return lines


def _skipped_rows(manifest: Manifest) -> list[str] | None:
    """Markdown lines naming the bad rows left out of the corpus (``on_error="skip"``)."""
    skipped = manifest.counts.skipped
    if not skipped:
        return None
    first = manifest.counts.first_skipped
    total = sum(skipped.values())
    reasons = ", ".join(
        f"{k}: {v}" + (f" (first at {first[k]})" if k in first else "") for k, v in skipped.items()
    )
    return [
        f"> **{total} bad {'row' if total == 1 else 'rows'} skipped at export** (`--on-error "
        f"skip`): {reasons}. The suite and its weights stand for the other rows only "
        "(`manifest.json`, `counts.skipped`).",
    ]


def _reload_tokenizer(name: str) -> Any:
    """The suite's tokenizer loaded again by name, or None (logged) when it cannot be."""
    if not name:
        return None
    from distprompt.recover.decode import load_tokenizer

    try:
        return load_tokenizer(name)[0]
    except (DistpromptError, OSError, ValueError) as exc:
        logger.warning("tokenizer %r not loadable (%s): RUN.md drop counts unknown", name, exc)
        return None
