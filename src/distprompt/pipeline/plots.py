"""The report's plots drawn in fresh (spawned) processes while the export's last items are
decoded and its other files written (:class:`PlotProcess`), so that drawing them is off the
export's critical path and a plot that fails is said, not lost in silence.
"""

from __future__ import annotations

import logging
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
    """The plots of a report drawn in fresh Python processes while this one goes on
    (:class:`~distprompt.engine.background.Helpers`: not forked, which would copy ~100 MB of
    the pages they share with this one). They are started before the report exists, to import
    matplotlib meanwhile (~1 s), and wait for it: :meth:`send` hands it over; each draws a
    share of the plots (:func:`~distprompt.write.render.plot_groups`). Calling waits for the
    PNGs; those of a process that failed are drawn here, with a warning.
    """

    def __init__(self, processes: int = 1) -> None:
        from distprompt.engine.background import Helpers
        from distprompt.write.render import plot_groups

        self._report: Any = None
        code = (
            "import sys; from distprompt.write.render import serve_plots; serve_plots(sys.argv[1:])"
        )
        self._helpers = Helpers(code, plot_groups(processes))

    def send(self, report: Any) -> None:
        """Hand ``report`` over (pickled, to each process)."""
        self._report = report
        self._helpers.send(report)

    def __call__(self) -> dict[str, bytes]:
        pngs: dict[str, bytes] = {}
        for served in self._helpers.results():
            if isinstance(served.result, dict):
                pngs.update(served.result)
                continue
            plot_logger.warning(
                "the plot process failed (%s); the plots are drawn here instead", served.why
            )
            from distprompt.write.render import plots

            pngs.update(plots(self._report, served.args))
        from distprompt.write.render import PLOT_NAMES

        return {n: pngs[n] for n in PLOT_NAMES if n in pngs}

    def stop(self) -> None:
        """Stop the processes (the plots are not wanted)."""
        self._helpers.stop()


class ReportDrawing:
    """The report, built once: as soon as every source is selected, without the items (its
    plots, which are those of the final report, drawn meanwhile on a large corpus in a fresh
    process while the items are decoded), then completed with the items
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
                # One: a second, each drawing about half, came ~65 MB on top of the export's
                # peak, which is here (benchmark corpus, peak PSS of the process tree: two
                # workers 569-610 -> 532-554 MB, one worker 653-675 -> 580-582 MB) for
                # 0.0-0.4 s less wall (11.17 / 10.41-10.92 s against 11.22 / 10.76-10.96 s,
                # medians of interleaved runs).
                self.plots = PlotProcess(1)
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
