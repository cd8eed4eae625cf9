"""Write the options tables of docs/reference.md from the metadata of ``distprompt.Config``.

Each command that takes ``Config`` options (``distprompt.config.COMMAND_GROUPS``) has one table
between the markers ``<!-- options: COMMAND … -->`` and ``<!-- end of options -->``; this script
rewrites what is between them and leaves the rest of the page as written. ``export`` shows each
option's whole text, a command that shares options with it the first sentence.
``tests/test_docs.py`` fails when the page and the metadata drift apart.

Usage: python scripts/gen_reference.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from distprompt.config import COMMAND_GROUPS, Option, options

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
BEGIN = "<!-- options: {command} (generated from distprompt.Config by scripts/gen_reference.py) -->"
END = "<!-- end of options -->"
_BLOCK = re.compile(r"^<!-- options: ([\w-]+) .*?-->\n.*?^<!-- end of options -->$", re.M | re.S)


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop outside parentheses and backticks.

    Example:
        >>> first_sentence("Ray (e.g. `a.b`). Default: none.")
        'Ray (e.g. `a.b`).'
    """
    depth, code = 0, False
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif not code and ch in "([":
            depth += 1
        elif not code and ch in ")]":
            depth -= 1
        elif not code and depth == 0 and ch == "." and text[i + 1 : i + 3].strip()[:1].isupper():
            return text[: i + 1]
    return text


def _spelling(o: Option) -> str:
    if o.metavar:
        return f"`{o.flag} {o.metavar}`"
    return " / ".join(f"`{f}`" for f in o.flag.split("/"))


def _field(o: Option) -> str:
    return f"`{o.name}={not o.default}`" if o.negate else f"`{o.name}`"


def table(command: str) -> str:
    """The markdown table of the ``Config`` options ``command`` takes, with its markers."""
    whole = command == "export"
    rows = [
        BEGIN.format(command=command),
        "| option | `Config` field | default | meaning |",
        "|---|---|---|---|",
    ]
    for o in options(*COMMAND_GROUPS[command]):
        meaning = o.doc if whole else first_sentence(o.doc)
        rows.append(f"| {_spelling(o)} | {_field(o)} | {o.doc_default} | {meaning} |")
    rows.append(END)
    return "\n".join(rows)


def render(text: str) -> str:
    """``text`` (docs/reference.md) with every options table written from the metadata.

    Raises:
        ValueError: A command of ``COMMAND_GROUPS`` has no table in ``text``.
    """
    found = {m.group(1) for m in _BLOCK.finditer(text)}
    missing = sorted(set(COMMAND_GROUPS) - found)
    if missing:
        raise ValueError(f"expected an options table for {', '.join(missing)}, found none")
    return _BLOCK.sub(lambda m: table(m.group(1)), text)


def main() -> int:
    text = REFERENCE.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print(f"{REFERENCE} is stale: run python scripts/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        REFERENCE.write_text(new, encoding="utf-8")
        print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
