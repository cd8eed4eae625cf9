"""Command line: a thin typer layer over the library. The only place errors become exit codes."""

from __future__ import annotations

import logging
import signal
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from distprompt._version import __version__
from distprompt.errors import DistpromptError

__all__ = ["app", "main"]

app = typer.Typer(
    name="distprompt",
    help="Recover the prompt distribution of tokenized training data and build a small, "
    "representative benchmark prompt suite with provenance.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_DATA = 2
_state: dict[str, Any] = {"verbose": False}


class OnError(str, Enum):
    raise_ = "raise"
    skip = "skip"


class Allocation(str, Enum):
    proportional = "proportional"
    sqrt = "sqrt"
    equal = "equal"


class Method(str, Enum):
    herding = "herding"
    kmedoids = "kmedoids"
    random = "random"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"distprompt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log details; show tracebacks on errors.")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    _state["verbose"] = verbose
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def _warn(msg: str) -> None:
    typer.echo(f"warning: {msg}", err=True)


@app.command()
def export(
    data: Annotated[
        list[str],
        typer.Argument(
            help="Directory (searched recursively), glob, or shard files "
            "(.jsonl, .jsonl.gz, .jsonl.zst)."
        ),
    ],
    tokenizer: Annotated[
        str,
        typer.Option(
            "--tokenizer", "-t", help="Local tokenizer folder, tokenizer.json, or hub id."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")],
    per_source: Annotated[
        int, typer.Option(help="Items from every source (ignored with --total).", min=1)
    ] = 50,
    total: Annotated[
        int | None, typer.Option(help="Total items, split between sources by --allocation.", min=1)
    ] = None,
    allocation: Annotated[
        Allocation, typer.Option(help="How --total is split: by rows, sqrt of rows, or equally.")
    ] = Allocation.proportional,
    min_per_source: Annotated[int, typer.Option(help="Floor per source with --total.", min=0)] = 0,
    max_candidates: Annotated[
        int,
        typer.Option(help="Unique prompts kept per source for selection (bounds memory).", min=1),
    ] = 20000,
    seed: Annotated[int, typer.Option(help="Seed; same input and seed => same files.", min=0)] = 0,
    on_error: Annotated[
        OnError,
        typer.Option(
            help="raise: stop at the first bad row (exit 2); skip: count and skip bad rows."
        ),
    ] = OnError.raise_,
    method: Annotated[
        Method, typer.Option(help="Selection method within a source.")
    ] = Method.herding,
    max_output_tokens: Annotated[
        int | None, typer.Option(help="Cap on each item's max_tokens.", min=1)
    ] = None,
    formats: Annotated[
        str | None, typer.Option(help="Comma-separated client formats (default: all).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Processes reading shards in parallel.", min=1)] = 1,
    no_turns: Annotated[bool, typer.Option("--no-turns", help="Skip chat-turn recovery.")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace a non-empty output folder.")
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr.")
    ] = True,
) -> None:
    """Build a representative prompt suite from tokenized shards and write it to OUT."""
    from distprompt.export import FORMATS
    from distprompt.pipeline import build_suite
    from distprompt.suite import prepare_out_dir

    fmts = FORMATS if formats is None else tuple(f.strip() for f in formats.split(",") if f.strip())
    unknown = [f for f in fmts if f not in FORMATS]
    if unknown:
        from distprompt.errors import ConfigError

        raise ConfigError(f"expected --formats from {', '.join(FORMATS)}, found {unknown[0]!r}")
    # Refuse an occupied OUT before reading gigabytes.
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        with prepare_out_dir(out, overwrite=False):
            pass
    suite = build_suite(
        data if len(data) > 1 else data[0],
        tokenizer=tokenizer,
        per_source=per_source,
        total=total,
        allocation=allocation.value,
        min_per_source=min_per_source,
        max_candidates=max_candidates,
        seed=seed,
        on_error=on_error.value,
        method=method.value,
        max_output_tokens=max_output_tokens,
        workers=workers,
        recover_turns=not no_turns,
        progress=progress and sys.stderr.isatty(),
        warn=_warn,
    )
    suite.save(out, formats=fmts, overwrite=overwrite)
    typer.echo(_summary(suite.manifest), err=True)
    typer.echo(f"wrote {len(suite)} items to {out}", err=True)


def _summary(manifest: dict[str, Any]) -> str:
    head = ("source", "rows", "unique", "cands", "target", "selected", "tokens%")
    lines = [head]
    for src, s in manifest.get("sources", {}).items():
        fid = s.get("fidelity") or {}
        n = sum(fid.values())
        pct = f"{100.0 * fid.get('tokens', 0) / n:.0f}" if n else "-"
        uniq = f"{s['unique_prompts']}" + ("" if s.get("unique_exact", True) else "~")
        lines.append(
            (
                src,
                str(s["rows"]),
                uniq,
                str(s["candidates"]),
                str(s["target"]),
                str(s["selected"]),
                pct,
            )
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = []
    for r in lines:
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    skipped = manifest.get("counts", {}).get("skipped") or {}
    if skipped:
        out.append("skipped rows: " + ", ".join(f"{k}={v}" for k, v in skipped.items()))
    return "\n".join(out)


def _on_sigterm(signum: int, frame: Any) -> NoReturn:
    # Unwind like Ctrl-C so temp files and partial folders are removed.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``distprompt`` and ``python -m distprompt``; returns the exit code."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app(args=argv, standalone_mode=False)
    except DistpromptError as exc:
        if _state["verbose"]:
            import traceback

            traceback.print_exc()
        typer.echo(f"error: {exc}", err=True)
        return EXIT_DATA
    except KeyboardInterrupt:
        typer.echo("interrupted: nothing was written", err=True)
        return 130
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        return 1
    except Exception as exc:  # click usage errors and the like
        # typer vendors click: usage errors are ClickException subclasses with show()/exit_code.
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            return int(exc.exit_code)  # type: ignore[attr-defined]
        raise
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
