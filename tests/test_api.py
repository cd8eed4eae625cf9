"""The public namespace."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import distprompt
from distprompt import errors


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
