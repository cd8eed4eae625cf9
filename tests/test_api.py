"""The public namespace."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import distprompt
from distprompt import errors

from factories import make_corpus


def test_all_is_complete_and_importable() -> None:
    # submodules and subpackages are reachable as attributes once imported; they are not the API
    submodules = {m.name for m in pkgutil.iter_modules(distprompt.__path__)}
    public = {n for n in dir(distprompt) if not n.startswith("_")} - submodules
    assert public <= set(distprompt.__all__)
    for name in distprompt.__all__:
        assert hasattr(distprompt, name), name


def test_errors_inherit_builtins() -> None:
    assert issubclass(errors.DataError, ValueError)
    assert issubclass(errors.InputError, OSError)
    assert issubclass(errors.OutputError, OSError)
    assert issubclass(errors.TemplateError, errors.TokenizerError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.DistpromptError)


def test_import_is_light() -> None:
    code = (
        "import sys, distprompt, distprompt.cli; "
        "print(sorted(m for m in ('transformers', 'sklearn', 'datasets', 'matplotlib', 'ray', "
        "'fsspec') "
        "if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_inspect_imports_only_what_it_needs(
    qwen_tokenizer: Any, qwen_dir: Path, tmp_path: Path
) -> None:
    """``inspect`` checks the tokenizer (transformers, for its chat template) but selects,
    plots and tabulates nothing: no scikit-learn, scipy, matplotlib, pandas or polars."""
    prepared = make_corpus(tmp_path, qwen_tokenizer, {"chat": 12, "code": 8})
    code = (
        "import sys\n"
        "from distprompt import inspect_corpus\n"
        f"inspect_corpus({str(prepared)!r}, tokenizer={str(qwen_dir)!r})\n"
        "heavy = ('sklearn', 'scipy', 'matplotlib', 'pandas', 'polars', 'transformers')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert r.stdout.strip().splitlines()[-1] == "['transformers']"
