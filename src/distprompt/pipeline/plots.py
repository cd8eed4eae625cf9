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
from typing import Any

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
