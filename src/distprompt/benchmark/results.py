"""A bench run's results on disk: ``requests.jsonl`` (one request a line) beside
``summary.json``, ``summary.md`` and ``summary.png``, written and read back by
:class:`BenchResults`; :func:`check_results_dir` refuses a folder that holds something else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from distprompt.benchmark.report import SUMMARY_JSON
from distprompt.errors import InputError, OutputError, api_spelling
from distprompt.write.out_dir import atomic_write_lines

__all__ = ["PARTIAL_NAME", "REQUESTS_NAME", "BenchResults", "check_results_dir"]


REQUESTS_NAME = "requests.jsonl"


PARTIAL_NAME = ".requests.jsonl.partial"


class BenchResults:
    """The requests of a bench run (one dict per request, as in ``requests.jsonl``) and its
    metadata; the summary is computed from them on demand.

    Example:
        >>> res = bench("suite/", url="http://127.0.0.1:30000", api="sglang")  # doctest: +SKIP
        >>> res.summary["by_source"][0]["accept_length"]  # Σ w·tokens / Σ w·steps  # doctest: +SKIP
        >>> df = res.to_polars()  # one row per request  # doctest: +SKIP
        >>> res.save("results/")  # doctest: +SKIP
    """

    def __init__(
        self,
        requests: Sequence[dict[str, Any]],
        meta: dict[str, Any],
        windows: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.requests: list[dict[str, Any]] = list(requests)
        self.meta = meta
        self.windows: list[dict[str, Any]] = list(windows)
        self._summary: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.requests)

    def __repr__(self) -> str:
        state = "complete" if self.complete else "incomplete"
        return f"BenchResults({len(self.requests)} requests, {self.meta.get('api')}, {state})"

    @property
    def complete(self) -> bool:
        """False when the run was interrupted or stopped early (what finished is kept)."""
        return bool(self.meta.get("complete", False))

    @property
    def summary(self) -> dict[str, Any]:
        """The figures of ``summary.json`` (see :func:`distprompt.benchmark.stats.summarize`)."""
        if self._summary is None:
            from distprompt.benchmark.stats import summarize

            self._summary = summarize(self.requests, self.windows, self.meta)
        return self._summary

    def to_polars(self) -> Any:
        """One row per request (ITL and the spec histogram as list columns)."""
        import polars as pl

        return pl.DataFrame(self.requests, infer_schema_length=None)

    @api_spelling
    def save(self, out: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write ``requests.jsonl`` (atomically), ``summary.json``, ``summary.md`` and the plot.

        Raises:
            OutputError: ``out`` holds files that are not a previous bench result, or holds a
                result and ``overwrite`` is not set.
        """
        p = Path(out)
        if not (p / PARTIAL_NAME).is_file():  # a run writing here has already checked
            check_results_dir(p, overwrite=overwrite)
        atomic_write_lines(p / REQUESTS_NAME, (orjson.dumps(r) for r in self.requests))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p / PARTIAL_NAME)
        self.write_summary(p)
        return p

    def write_summary(self, out: Path) -> None:
        from distprompt.benchmark.report import write_summary_files

        write_summary_files(out, self.summary, self.meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BenchResults:
        """Read a results folder written by :meth:`save` (or by an interrupted run).

        Raises:
            InputError: No bench result at ``path``.
        """
        p = Path(path)
        req_path = p / REQUESTS_NAME
        if not req_path.is_file() and (p / PARTIAL_NAME).is_file():
            req_path = p / PARTIAL_NAME  # a run killed without clean-up (SIGKILL)
        if not req_path.is_file() or not (p / SUMMARY_JSON).is_file():
            raise InputError(
                f"{p}: expected a bench results folder with {REQUESTS_NAME} and {SUMMARY_JSON}, "
                "found none; pass the --out folder of a finished `distprompt bench`"
            )
        summary = orjson.loads((p / SUMMARY_JSON).read_bytes())
        requests = []
        with open(req_path, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        requests.append(orjson.loads(line))
                    except orjson.JSONDecodeError as exc:
                        raise InputError(
                            f"{req_path}:{n}: expected a JSON request record, found {exc}; "
                            "the file was cut short — run the benchmark again"
                        ) from exc
        return cls(requests, summary.get("meta", {}), summary.get("windows", []))


def check_results_dir(out: Path, *, overwrite: bool) -> None:
    """Refuse a results folder that holds something else, before any request is sent.

    Raises:
        OutputError: ``out`` is a file; holds files but no previous result; holds a previous
            result and ``overwrite`` is not set.
    """
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: expected a results folder, found a file; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        ours = (out / SUMMARY_JSON).is_file() or (out / REQUESTS_NAME).is_file()
        if not ours:
            raise OutputError(
                f"{out}: expected an empty or new results folder, found other files in it; "
                "choose another --out"
            )
        if not overwrite:
            raise OutputError(
                f"{out}: expected an empty or new results folder, found a previous bench result; "
                "pass --overwrite to replace it, or choose another --out"
            )
