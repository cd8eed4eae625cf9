"""distprompt: recover the prompt distribution of tokenized training data and build a small,
representative benchmark prompt suite with provenance.

Example:
    >>> from distprompt import build_suite  # doctest: +SKIP
    >>> suite = build_suite("prepared/", tokenizer="tok/", per_source=50)  # doctest: +SKIP
    >>> suite.save("out/")  # doctest: +SKIP
"""

from distprompt._version import __version__
from distprompt.bench_import import import_aiperf
from distprompt.bench_run import BenchInterrupted, BenchResults, bench
from distprompt.bench_stats import compare as bench_compare
from distprompt.corpus import CorpusInfo, inspect_corpus
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
from distprompt.pipeline import build_suite
from distprompt.records import Provenance, SuiteItem
from distprompt.report import Report, render_report
from distprompt.suite import Suite

__all__ = [
    "BenchInterrupted",
    "BenchResults",
    "ConfigError",
    "CorpusInfo",
    "CorruptStreamError",
    "DataError",
    "DistpromptError",
    "InputError",
    "OutputError",
    "Provenance",
    "Report",
    "ServerError",
    "Suite",
    "SuiteItem",
    "TemplateError",
    "TokenizerError",
    "__version__",
    "bench",
    "bench_compare",
    "build_suite",
    "import_aiperf",
    "inspect_corpus",
    "render_report",
]
