"""The report's plots drawn in fresh (spawned) processes while the export's last items are
decoded and its other files written (:class:`PlotProcess`), so that drawing them is off the
export's critical path and a plot that fails is said, not lost in silence.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from distprompt._heap import trim_heap
from distprompt.choose.stratify import Quota
from distprompt.records import SourceStats, SuiteItem
from distprompt.write.metrics import SourceEvidence
from distprompt.write.report import Report, build_report, with_items

#: Not distprompt.pipeline: the CLI prints these (build_suite's warnings reach it by ``warn``).
plot_logger = logging.getLogger("distprompt.pipeline.plots")


class PlotProcess:
    """The plots of a report drawn in fresh Python processes while this one goes on.

    Subprocesses rather than forked workers, which would copy ~100 MB of the pages they share
    with this one (measured on the benchmark corpus), and rather than a multiprocessing spawn,
    which imports the caller's main script again. They are started before the report exists,
    to import matplotlib meanwhile (~1 s), and wait for it on stdin: :meth:`send` hands it
    over; each draws a share of the plots (:func:`~distprompt.write.render.plot_groups`).
    Calling waits for the PNGs; those of a process that failed are drawn here, with a warning.
    """

    def __init__(self, processes: int = 1) -> None:
        import subprocess

        from distprompt.write.render import plot_groups

        self._report: Any = None
        code = (
            "import sys; from distprompt.write.render import serve_plots; serve_plots(sys.argv[1:])"
        )
        self._procs = [
            (
                names,
                subprocess.Popen(
                    [sys.executable, "-c", code, *names],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    # It imports distprompt from where this process did.
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                ),
            )
            for names in plot_groups(processes)
        ]
        self._out: list[tuple[bytes, bytes]] = [(b"", b"")] * len(self._procs)
        self._readers: list[threading.Thread] = []

    def send(self, report: Any) -> None:
        """Hand ``report`` over (pickled, on each process's stdin)."""
        import pickle

        self._report = report
        data = pickle.dumps(report, protocol=pickle.HIGHEST_PROTOCOL)
        for i in range(len(self._procs)):
            # Written and read as it goes (communicate), so that no process blocks on a pipe.
            reader = threading.Thread(target=self._communicate, args=(i, data), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _communicate(self, i: int, data: bytes) -> None:
        proc = self._procs[i][1]
        with contextlib.suppress(OSError, ValueError):  # it died before it read the report
            self._out[i] = proc.communicate(data)
        proc.wait()

    def __call__(self) -> dict[str, bytes]:
        import pickle

        assert self._readers, "send() first"
        pngs: dict[str, bytes] = {}
        for reader in self._readers:
            reader.join()
        for (names, proc), (out, err) in zip(self._procs, self._out, strict=True):
            got = None
            if proc.returncode == 0:
                with contextlib.suppress(Exception):
                    got = pickle.loads(out)
            if isinstance(got, dict):
                pngs.update(got)
                continue
            lines = err.decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else f"exit code {proc.returncode}"
            plot_logger.warning(
                "the plot process failed (%s); the plots are drawn here instead", why
            )
            from distprompt.write.render import plots

            pngs.update(plots(self._report, names))
        from distprompt.write.render import PLOT_NAMES

        return {n: pngs[n] for n in PLOT_NAMES if n in pngs}

    def stop(self) -> None:
        """Stop the processes (the plots are not wanted)."""
        for _, proc in self._procs:
            proc.kill()
        for reader in self._readers:
            reader.join()
        for _, proc in self._procs:
            with contextlib.suppress(OSError, ValueError):
                proc.communicate()


class ReportDrawing:
    """The report, built once: as soon as every source is selected, without the items (its
    plots, which are those of the final report, drawn meanwhile on a large corpus in two fresh
    processes while the items are decoded), then completed with the items
    (:func:`~distprompt.write.report.with_items`)."""

    def __init__(
        self,
        *,
        stats: Mapping[str, SourceStats],
        quotas: Mapping[str, Quota],
        meta: dict[str, Any],
        max_output_tokens: int | None,
        big: bool,
    ) -> None:
        self._stats, self._quotas, self._meta = stats, quotas, meta
        self._max_out, self._big = max_output_tokens, big
        self._prebuilt: Report | None = None
        self.plots: PlotProcess | None = None

    def draw(self, counts: dict[str, int], evidence: dict[str, SourceEvidence | None]) -> None:
        """Every source is selected: build the report without the items, and on a large corpus
        start the plot processes (not before: beside the last selections their ~100 MB came on
        top of the largest pools' matrices; measured on the benchmark's 4x corpus, the process
        tree's peak 611-643 -> 579-595 MB) and hand it to them."""
        rep = build_report(
            evidence, stats=self._stats, quotas=self._quotas, items=(), selected=counts,
            meta=self._meta, max_output_tokens=self._max_out,
        )  # fmt: skip
        self._prebuilt = rep
        if self._big:
            if self.plots is None:
                trim_heap()  # what selection freed, before other processes start
                # Two, each drawing about half: the plots are the last work of the export
                # (measured with one worker: the process tree's PSS peaks at 503 MB then,
                # below selection's peak with the plots in one process, 481 MB).
                self.plots = PlotProcess(2)
            self.plots.send(rep)

    def report(
        self, evidence: Mapping[str, SourceEvidence | None], items: Sequence[SuiteItem]
    ) -> Report:
        """The final report: the one built before decoding completed with the items; built from
        them when there was none, or decoding left a source with another number of items."""
        if self._prebuilt is not None:
            try:
                return with_items(self._prebuilt, items)
            except ValueError:
                plot_logger.debug("items differ from the selection's counts: report rebuilt")
        return build_report(
            evidence, stats=self._stats, quotas=self._quotas, items=items, meta=self._meta,
            max_output_tokens=self._max_out,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the plot processes (the export failed)."""
        if self.plots is not None:
            self.plots.stop()
