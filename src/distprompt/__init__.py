"""distprompt: recover the prompt distribution of tokenized training data and build a small,
representative benchmark prompt suite with provenance.

Example:
    >>> from distprompt import build_suite  # doctest: +SKIP
    >>> suite = build_suite("prepared/", tokenizer="tok/", per_source=50)  # doctest: +SKIP
    >>> suite.save("out/")  # doctest: +SKIP
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from distprompt._version import __version__
from distprompt.errors import (
    ConfigError,
    CorruptStreamError,
    DataError,
    DistpromptError,
    InputError,
    OutputError,
    ServerError,
    TemplateError,
    TokenizerError,
)

if _TYPE_CHECKING:
    from distprompt.benchmark.aiperf import import_aiperf
    from distprompt.benchmark.compare import compare as bench_compare
    from distprompt.benchmark.report import render_compare as render_bench_compare
    from distprompt.benchmark.report import render_summary as render_bench_summary
    from distprompt.benchmark.run import BenchInterrupted, BenchResults, bench
    from distprompt.config import Config
    from distprompt.corpus import CorpusInfo
    from distprompt.evaluate.drafters import Drafter, SpecCounts
    from distprompt.evaluate.simulation import Simulation, simulate_suite
    from distprompt.manifest import Manifest
    from distprompt.pipeline import build_suite, export_suite, inspect_corpus
    from distprompt.records import Provenance, SuiteItem
    from distprompt.write.report import Report, render_report
    from distprompt.write.suite import Suite

# Imported on first use: ``import distprompt`` (and every worker process) stays cheap.
_LAZY = {
    "BenchInterrupted": "distprompt.benchmark.run",
    "BenchResults": "distprompt.benchmark.run",
    "bench": "distprompt.benchmark.run",
    "bench_compare": "distprompt.benchmark.compare",
    "import_aiperf": "distprompt.benchmark.aiperf",
    "render_bench_compare": "distprompt.benchmark.report",
    "render_bench_summary": "distprompt.benchmark.report",
    "Config": "distprompt.config",
    "CorpusInfo": "distprompt.corpus",
    "Drafter": "distprompt.evaluate.drafters",
    "SpecCounts": "distprompt.evaluate.drafters",
    "Simulation": "distprompt.evaluate.simulation",
    "simulate_suite": "distprompt.evaluate.simulation",
    "Manifest": "distprompt.manifest",
    "inspect_corpus": "distprompt.pipeline",
    "build_suite": "distprompt.pipeline",
    "export_suite": "distprompt.pipeline",
    "Provenance": "distprompt.records",
    "SuiteItem": "distprompt.records",
    "Report": "distprompt.write.report",
    "render_report": "distprompt.write.report",
    "Suite": "distprompt.write.suite",
}

#: Public names that differ from the attribute in their module.
_ATTR = {
    "bench_compare": "compare",
    "render_bench_compare": "render_compare",
    "render_bench_summary": "render_summary",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'distprompt' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), _ATTR.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BenchInterrupted",
    "BenchResults",
    "Config",
    "ConfigError",
    "CorpusInfo",
    "CorruptStreamError",
    "DataError",
    "DistpromptError",
    "Drafter",
    "InputError",
    "Manifest",
    "OutputError",
    "Provenance",
    "Report",
    "ServerError",
    "Simulation",
    "SpecCounts",
    "Suite",
    "SuiteItem",
    "TemplateError",
    "TokenizerError",
    "__version__",
    "bench",
    "bench_compare",
    "build_suite",
    "export_suite",
    "import_aiperf",
    "inspect_corpus",
    "render_bench_compare",
    "render_bench_summary",
    "render_report",
    "simulate_suite",
]
