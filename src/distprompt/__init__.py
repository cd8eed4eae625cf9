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
    TemplateError,
    TokenizerError,
)

if _TYPE_CHECKING:
    from distprompt.corpus import CorpusInfo, inspect_corpus
    from distprompt.pipeline import build_suite
    from distprompt.records import Provenance, SuiteItem
    from distprompt.report import Report, render_report
    from distprompt.suite import Suite

# Imported on first use: ``import distprompt`` (and every worker process) stays cheap.
_LAZY = {
    "CorpusInfo": "distprompt.corpus",
    "inspect_corpus": "distprompt.corpus",
    "build_suite": "distprompt.pipeline",
    "Provenance": "distprompt.records",
    "SuiteItem": "distprompt.records",
    "Report": "distprompt.report",
    "render_report": "distprompt.report",
    "Suite": "distprompt.suite",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'distprompt' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ConfigError",
    "CorpusInfo",
    "CorruptStreamError",
    "DataError",
    "DistpromptError",
    "InputError",
    "OutputError",
    "Provenance",
    "Report",
    "Suite",
    "SuiteItem",
    "TemplateError",
    "TokenizerError",
    "__version__",
    "build_suite",
    "inspect_corpus",
    "render_report",
]
