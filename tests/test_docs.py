"""docs/: every CLI command and option is in docs/reference.md, in step with --help."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest

from conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
REFERENCE = DOCS / "reference.md"
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])\b")


def _click_app() -> Any:
    import typer

    from distprompt.cli import app

    return typer.main.get_command(app)


def _commands() -> dict[str, Any]:
    return dict(_click_app().commands)


def _section(name: str) -> str:
    text = REFERENCE.read_text(encoding="utf-8")
    m = re.search(rf"^## `distprompt {re.escape(name)}`\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"docs/reference.md has no section '## `distprompt {name}`'"
    return m.group(1)


def _global_section() -> str:
    text = REFERENCE.read_text(encoding="utf-8")
    m = re.search(r"^## Global options\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/reference.md has no '## Global options' section"
    return m.group(1)


def _documented(section: str) -> set[str]:
    """Options written in backticks in a section (`--x`, `-x`, `--a` / `--b`)."""
    found: set[str] = set()
    section = re.sub(r"```.*?```", "", section, flags=re.S)  # usage blocks are not the list
    for code in re.findall(r"`([^`]+)`", section):
        if code.startswith("-"):
            found.update(_OPTION.findall(code))
    return found


def _options(cmd: Any) -> set[str]:
    out: set[str] = set()
    for p in cmd.params:
        if p.param_type_name == "option":
            out.update(p.opts)
            out.update(p.secondary_opts)
    out.add("--help")
    return out


def _help(*args: str, columns: int = 250) -> str:
    env = dict(os.environ, COLUMNS=str(columns), NO_COLOR="1", TERM="dumb")
    r = subprocess.run(
        [sys.executable, "-m", "distprompt", *args, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return r.stdout


def test_every_command_has_a_section() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    documented = set(re.findall(r"^## `distprompt ([\w-]+)`", text, re.M))
    assert documented == set(_commands())
    root_help = _help()
    for name in _commands():
        assert name in root_help


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_and_argument_is_documented(name: str) -> None:
    cmd = _commands()[name]
    section = _section(name)
    documented = _documented(section)
    opts = _options(cmd) - {"--help"}
    assert opts <= documented, f"{name}: undocumented {sorted(opts - documented)}"
    assert documented <= _options(cmd), f"{name}: stale {sorted(documented - _options(cmd))}"
    for p in cmd.params:
        if p.param_type_name == "argument":
            assert f"`{p.name.upper()}" in section, f"{name}: argument {p.name.upper()}"
    first_line = (cmd.help or "").strip().splitlines()[0]
    assert first_line, f"{name} has no help text"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_help_output_agrees_with_reference(name: str) -> None:
    body = "\n".join(ln for ln in _help(name).splitlines() if "Usage:" not in ln)
    shown = set(_OPTION.findall(body)) - {"--help"}
    # --help output is what users see: each option in it is in the section, and vice versa
    assert shown == _options(_commands()[name]) - {"--help"}  # the help text was read right
    documented = _documented(_section(name))
    assert shown <= documented, f"{name}: in --help, not in docs: {sorted(shown - documented)}"
    assert documented - {"--help"} <= shown, (
        f"{name}: in docs, not in --help: {sorted(documented - shown - {'--help'})}"
    )


def test_global_options_documented() -> None:
    root = _click_app()
    opts = _options(root) - {"--help"}
    assert opts <= _documented(_global_section())


def test_commands_in_docs_use_real_options() -> None:
    """Every ``distprompt CMD --opt`` written anywhere in docs/ exists for that command."""
    cmds = _commands()
    # command names may hold a hyphen (bench-compare): the name runs up to the first space
    pattern = re.compile(r"(?:python -m )?distprompt ([\w-]+)((?:[^\n`|]|\\\n)*)")
    for md in sorted(DOCS.glob("*.md")):
        for m in pattern.finditer(md.read_text(encoding="utf-8")):
            name, rest = m.group(1), m.group(2)
            if name not in cmds:
                continue
            used = {o for o in _OPTION.findall(rest) if o.startswith("--")}
            bad = used - _options(cmds[name])
            assert not bad, f"{md.name}: `distprompt {name}` with unknown {sorted(bad)}"


def test_pages_exist_and_formats_page_covers_every_format() -> None:
    from distprompt.write.formats import FORMATS

    for page in ("quickstart.md", "concepts.md", "reference.md", "formats.md"):
        assert (DOCS / page).is_file(), page
    formats = (DOCS / "formats.md").read_text(encoding="utf-8")
    for fmt in FORMATS:
        assert f"`{fmt}`" in formats, f"formats.md does not mention format {fmt!r}"
    for client in ("sglang.bench_serving", "vllm bench serve", "guidellm run", "aiperf profile"):
        assert client in formats


#: Paths in the docs that are not modules of the package.
_NOT_SRC = ("tests/", "scripts/", "benchmarks/", "distprompt/")


def _modules() -> set[str]:
    """Every module of the package as a path below ``src/distprompt`` (``read/scan.py`` …),
    without the package markers and the private version file."""
    pkg = REPO_ROOT / "src" / "distprompt"
    return {
        p.relative_to(pkg).as_posix()
        for p in pkg.rglob("*.py")
        if p.name not in ("__init__.py", "_version.py")
    }


def test_architecture_page_names_every_module() -> None:
    text = (REPO_ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = {p for p in re.findall(r"`([\w/]+\.py)`", text) if not p.startswith(_NOT_SRC)}
    assert _modules() <= named, f"not in ARCHITECTURE.md: {sorted(_modules() - named)}"
    assert named <= _modules(), f"not modules: {sorted(named - _modules())}"


def test_concepts_module_map_names_real_modules() -> None:
    """Every ``a/b.py`` path docs/concepts.md mentions is a module of the package."""
    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    paths = {p for p in re.findall(r"`([a-z]+/\w+\.py)`", text) if not p.startswith(_NOT_SRC)}
    assert paths, "concepts.md's pipeline names no module"
    assert paths <= _modules(), sorted(paths - _modules())


# What README's set-up and quickstart's install step run before distprompt's own commands: the
# test's interpreter (installed with the same extras) stands for that fresh venv.
_INSTALL = 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[samples]"'
_FENCE = re.compile(r"^```(bash|python)\n(.*?)^```", re.M | re.S)
_WALK = r"""
import json, subprocess, sys
blocks = json.load(sys.stdin)
names, assigned = {}, []
for i, (lang, code) in enumerate(blocks):
    print(f"--- block {i} ({lang})", flush=True)
    if lang == "python":
        exec(compile(code, f"<block {i}>", "exec"), names)
        continue
    subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join([*assigned, code])], check=True)
    assigned += [ln for ln in code.splitlines() if ln.split("=")[0].isidentifier() and "=" in ln]
"""


def _fresh_copy(dest: Any) -> Any:
    import shutil

    skip = shutil.ignore_patterns(
        ".git", ".venv", ".ci-check-venv", "out", "__pycache__", "*.egg-info", ".*_cache"
    )
    return shutil.copytree(REPO_ROOT, dest, ignore=skip)


@pytest.mark.slow
def test_readme_then_every_quickstart_block_runs_in_a_fresh_copy(tmp_path: Any) -> None:
    """Issue 28: a new user follows README's set-up, then docs/quickstart.md top to bottom."""
    import json

    readme = _FENCE.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    setup = readme[0][1].strip()
    assert setup.startswith(_INSTALL + " && "), setup
    blocks = [("bash", setup.removeprefix(_INSTALL + " && "))]
    for lang, code in _FENCE.findall((DOCS / "quickstart.md").read_text(encoding="utf-8")):
        lines = [ln for ln in code.splitlines() if ln.strip() != _INSTALL]
        blocks.append((lang, "\n".join(lines)))
    assert sum(lang == "python" for lang, _ in blocks) >= 4, blocks
    repo = _fresh_copy(tmp_path / "repo")
    bindir = os.path.dirname(sys.executable)
    env = dict(
        os.environ,
        PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(repo / "src"),
        HF_HUB_OFFLINE="1",
        MPLBACKEND="Agg",
    )
    r = subprocess.run(
        [sys.executable, "-c", _WALK],
        input=json.dumps(blocks),
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (repo / "corpus.json").is_file() and (repo / "out" / "mix" / "RUN.md").is_file()


HELP_SNAPSHOT = REPO_ROOT / "tests" / "help_80.txt"


def _help_at_80() -> str:
    parts = []
    for name in ["", *sorted(_commands())]:
        text = _help(*([name] if name else []), columns=80)
        parts.append(f"$ distprompt {name} --help".replace("  ", " ") + "\n" + text)
    return "\n".join(parts)


def test_help_fits_80_columns_and_matches_the_snapshot() -> None:
    """Issue 28: at 80 columns rich cut options with '…', showed flags as <bool> and ate
    '[ray]' from a pip extra. DISTPROMPT_UPDATE_SNAPSHOT=1 rewrites tests/help_80.txt."""
    text = _help_at_80()
    long = [ln for ln in text.splitlines() if len(ln) > 80]
    assert not long, long
    assert "…" not in text and "<bool>" not in text
    cut = [ln for ln in text.splitlines() if ln.endswith("...") and "Usage:" not in ln]
    assert not cut, cut  # click's cut of a command's one-line help
    assert "pip install 'distprompt[ray]'" in text
    if os.environ.get("DISTPROMPT_UPDATE_SNAPSHOT") == "1":
        HELP_SNAPSHOT.write_text(text, encoding="utf-8")
    assert text == HELP_SNAPSHOT.read_text(encoding="utf-8"), (
        "--help changed: review it at 80 columns and rerun with DISTPROMPT_UPDATE_SNAPSHOT=1"
    )


def test_bench_docs_worked_example_uses_the_quickstart_suite() -> None:
    """Issue 28: docs/bench.md's example said --per-source 10 where the quickstart uses 20."""
    quick = set(re.findall(r"--per-source (\d+)", (DOCS / "quickstart.md").read_text("utf-8")))
    readme = set(re.findall(r"--per-source (\d+)", (REPO_ROOT / "README.md").read_text("utf-8")))
    assert len(quick) == 1 and quick <= readme, (quick, readme)
    bench = (DOCS / "bench.md").read_text(encoding="utf-8")
    example = bench[bench.index("## Worked example") :].split("```")[0]
    assert set(re.findall(r"--per-source (\d+)", example)) == quick


def _gen_reference() -> Any:
    """``scripts/gen_reference.py`` as a module (a script, not part of the package)."""
    import importlib.util

    path = REPO_ROOT / "scripts" / "gen_reference.py"
    spec = importlib.util.spec_from_file_location("gen_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_tables_are_generated_from_config() -> None:
    """Issue 31: options were spelled three times (CLI, Config, this page). The tables of
    Config's options are written by scripts/gen_reference.py from the fields' metadata."""
    gen = _gen_reference()
    text = REFERENCE.read_text(encoding="utf-8")
    assert gen.render(text) == text, "docs/reference.md drifted: python scripts/gen_reference.py"
    from distprompt.config import COMMAND_GROUPS, options

    for command, groups in COMMAND_GROUPS.items():
        documented = _documented(gen.table(command))
        assert documented == {f for o in options(*groups) for f in o.flag.split("/")}, command


def test_the_generator_rewrites_a_drifted_table() -> None:
    """The check above can fail: a hand-edited or missing row is put back, a table removed
    is an error."""
    gen = _gen_reference()
    text = REFERENCE.read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `--temperature` |"))
    drifted = text.replace(row, "| `--temperature` | `temperature` | 1 | Hot. |")
    assert drifted != text and gen.render(drifted) == text
    assert gen.render(text.replace(row + "\n", "")) == text
    start = text.index("<!-- options: inspect")
    end = text.index("<!-- end of options -->", start) + len("<!-- end of options -->")
    with pytest.raises(ValueError, match="inspect"):
        gen.render(text[:start] + text[end:])


def test_first_sentence_skips_stops_in_parentheses_and_code() -> None:
    first = _gen_reference().first_sentence
    assert first("Files (e.g. `a.b`). Default: all.") == "Files (e.g. `a.b`)."
    assert first("Run `x. Y` now. Then stop.") == "Run `x. Y` now."
    assert first("No stop here") == "No stop here"
