"""The C heap's free memory given back to the system, where it pays (see the callers)."""

from __future__ import annotations

import contextlib
import sys

__all__ = ["trim_heap"]


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere).

    Memory freed below glibc's mmap threshold (which earlier frees raise) stays in the heap,
    resident: counted in the process's memory, and shared with — then copied by — a worker
    forked after it.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not glibc: musl has none
        ctypes.CDLL(None).malloc_trim(0)
