"""Command line: a thin typer layer over the library. The only place errors become exit codes."""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import logging
import signal
import sys
import threading
import typing
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn, cast

import typer

from distprompt._version import __version__
from distprompt.config import COMMAND_GROUPS, Config, Option, options, resolve
from distprompt.errors import DistpromptError, cli_spelling

__all__ = ["app", "main"]

app = typer.Typer(
    name="distprompt",
    help="Recover the prompt distribution of tokenized training data and build a small, "
    "representative benchmark prompt suite with provenance.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: it wraps to the terminal (rich's option table cut names and help at 80
    # columns) and prints help text as written (rich markup ate "[ray]" of a pip extra).
    rich_markup_mode=None,
)

EXIT_DATA = 2
_state: dict[str, Any] = {"verbose": False}


def _choices(name: str, values: tuple[str, ...]) -> Any:
    """A typer choice type whose values are those of a :mod:`distprompt.config` ``Literal``."""
    return Enum(name, {v: v for v in values}, type=str)


# Arguments that more than one command takes.
Data = Annotated[
    list[str],
    typer.Argument(
        metavar="DATA",
        help="Directory (searched recursively), glob, or shard files "
        "(.jsonl, .jsonl.gz, .jsonl.zst; Parquet .parquet, Arrow .arrow).",
    ),
]
Glob = Annotated[
    str | None,
    typer.Option(
        "--glob",
        metavar="PATTERN",
        help=next(o.help for o in options("pass") if o.name == "glob"),
    ),
]


def _cli_type(option: Option, hint: Any) -> Any:
    """The type typer parses ``option`` as: a choice for a ``Literal``, a comma-separated
    string for a tuple (``Config`` splits it), else the field's own type."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Literal:
        return _choices(option.name, args)
    if typing.get_origin(hint) is tuple or tuple in {typing.get_origin(a) for a in args}:
        return str | None
    return hint


def _option_param(option: Option, hint: Any) -> inspect.Parameter:
    info = typer.Option(option.flag, help=option.help, metavar=option.metavar, min=option.min)
    annotation = cast(Any, Annotated)[_cli_type(option, hint), info]
    kind = inspect.Parameter.KEYWORD_ONLY
    return inspect.Parameter(option.param, kind, default=option.cli_default, annotation=annotation)


def _field_value(option: Option, value: Any) -> Any:
    """The field's value of what the command line gave (the choice's string, a flag undone)."""
    value = getattr(value, "value", value)  # typer passes the enum member of a choice
    return not value if option.negate else value


def _config_options(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the options of the :class:`Config` fields it takes
    (:data:`~distprompt.config.COMMAND_GROUPS`), generated from the fields' metadata.

    They replace the command's ``options`` parameter, in field order; the command receives
    them as ``options``, a dict of field names to values, without those left at a default
    that means "the library decides" (``--per-source`` beside ``--total``).
    """
    opts = options(*COMMAND_GROUPS[command])
    hints = typing.get_type_hints(Config)

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(fn, eval_str=True).parameters
        params: list[inspect.Parameter] = []
        for p in own.values():
            if p.name == "options":
                params += [_option_param(o, hints[o.name]) for o in opts]
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(fn)
        def run(**kwargs: Any) -> None:
            given = {o.name: kwargs.pop(o.param) for o in opts}
            # None from an option whose field has a default: not given, the library decides
            fn(
                **kwargs,
                options={
                    o.name: _field_value(o, v)
                    for o, v in zip(opts, given.values(), strict=True)
                    if v is not None or o.default is None
                },
            )

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


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


@app.command(short_help="Build a benchmark prompt suite from tokenized shards.")
@_config_options("export")
def export(
    data: Data,
    tokenizer: Annotated[
        str,
        typer.Option(
            "--tokenizer",
            "-t",
            metavar="TOK",
            help="Local tokenizer folder, tokenizer.json, or hub id.",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="OUT", help="Output folder.")],
    options: dict[str, Any],
) -> None:
    """Build a representative prompt suite from tokenized shards and write it to OUT."""
    from distprompt import export_suite

    # every option is checked here, before the tokenizer is loaded or any shard opened
    config = resolve(**{**options, "progress": options["progress"] and sys.stderr.isatty()})
    suite = export_suite(
        data if len(data) > 1 else data[0], out, tokenizer=tokenizer, config=config, warn=_warn
    )
    typer.echo(suite.summary(out), err=True)


@app.command("inspect", short_help="What is in a corpus; check a tokenizer against it.")
@_config_options("inspect")
def inspect_cmd(
    data: Data,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            "-t",
            help="Check the data against this tokenizer (vocabulary, chat-template markers, "
            "decode/encode round trip); exit 2 when it evidently does not match.",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the table.")
    ] = False,
    options: dict[str, Any] | None = None,
) -> None:
    """Show what is in a corpus, from one streaming pass: sources, shares, lengths, anomalies."""
    from distprompt import inspect_corpus

    info = inspect_corpus(
        data if len(data) > 1 else data[0],
        tokenizer=tokenizer,
        progress=sys.stderr.isatty(),
        **(options or {}),
    )
    if json_out:
        import orjson

        typer.echo(orjson.dumps(info.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(info.table())
    info.raise_for_mismatch()


@app.command("report", short_help="Re-render a suite's report from report.json.")
def report_cmd(
    out: Annotated[Path, typer.Argument(help="Output folder of an export (it holds report.json).")],
) -> None:
    """Re-render report.md, the PNG plots and report.html from OUT/report.json."""
    from distprompt import render_report

    typer.echo(render_report(out).summary)


@app.command("simulate", short_help="Model-free drafters: suite vs corpus acceptance.")
def simulate_cmd(
    suite: Annotated[Path, typer.Argument(help="Suite folder written by `distprompt export`.")],
    data: Annotated[
        list[str] | None,
        typer.Option(
            "--data",
            metavar="DATA",
            help="The corpus the suite was exported from (directory, glob or shard; repeat for "
            "several): exact corpus figures from every row, the suite's error against random "
            "samples, and the replies of suites without response_ids.",
        ),
    ] = None,
    drafter: Annotated[
        list[str] | None,
        typer.Option(
            "--drafter",
            metavar="NAME",
            help="A drafter to simulate, by name: ngram[MIN-MAX]kK (vLLM's n-gram proposer) or "
            "suffix-kK (suffix decoding; -dD, -fF, -pP set depth, spec factor, min prob); "
            "repeat for several. Default: ngram[1-3]k4, ngram[2-5]k4, suffix-k8.",
        ),
    ] = None,
    random_samples: Annotated[
        int,
        typer.Option(
            help="Uniform random samples per source, of the suite's size, the suite's error is "
            "compared with (needs --data).",
            min=0,
        ),
    ] = 20,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap and the random samples.")] = 0,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Where simulate.json and simulate.md go (default: SUITE)."
        ),
    ] = None,
    glob: Glob = None,
) -> None:
    """Simulate model-free speculative decoding (n-gram, suffix) on the recorded replies: the
    suite's weighted estimate per source and for the mix, and with --data how close it is to the
    whole corpus compared with random samples."""
    from distprompt import simulate_suite

    sim = simulate_suite(
        suite,
        data=(data if len(data) > 1 else data[0]) if data else None,
        drafters=drafter or None,
        random_samples=random_samples,
        seed=seed,
        out=out if out is not None else suite,
        glob=glob,
        progress=sys.stderr.isatty(),
    )
    typer.echo(sim.table())


# ---- bench: replay a suite against a server (bench, bench-import, bench-compare) ----------


class BenchAPI(str, Enum):
    sglang = "sglang"
    vllm = "vllm"
    openai_chat = "openai-chat"


class BenchTraffic(str, Enum):
    per_source = "per-source"
    mixed = "mixed"
    both = "both"


def _int_list(text: str, opt: str) -> list[int]:
    from distprompt.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"{opt}: expected comma-separated integers such as 1,4,16,64, found {text!r}"
        ) from None


BenchOut = Annotated[Path, typer.Option("--out", "-o", help="Results folder.")]
BenchOverwrite = Annotated[
    bool, typer.Option("--overwrite", help="Replace a previous bench result in OUT.")
]


def _bench_done(res: Any, out: Path) -> None:
    from distprompt import render_bench_summary

    typer.echo(render_bench_summary(res.summary), err=True)
    typer.echo(f"wrote {len(res)} requests to {out}", err=True)


@app.command("bench", short_help="Replay a suite against a server.")
def bench_cmd(
    suite: Annotated[Path, typer.Argument(help="Suite folder written by `distprompt export`.")],
    url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:30000.")],
    api: Annotated[
        BenchAPI,
        typer.Option(
            help="sglang: /generate with ids; vllm: /v1/completions with ids; "
            "openai-chat: /v1/chat/completions with messages."
        ),
    ],
    out: BenchOut,
    concurrency: Annotated[
        str, typer.Option(help="Comma-separated concurrency levels.")
    ] = "1,4,16,64",
    label: Annotated[str | None, typer.Option(help="Name of the run (default: the API).")] = None,
    sources: Annotated[
        str | None, typer.Option(help="Comma-separated sources to send (default: all).")
    ] = None,
    max_items: Annotated[
        int | None, typer.Option(help="At most this many items per source.", min=1)
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds a request may take, send to last event.", min=0.001)
    ] = 600.0,
    ignore_eos: Annotated[
        bool, typer.Option("--ignore-eos", help="Generate max_tokens past EOS (forced length).")
    ] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.", min=0.0)] = 0.0,
    model: Annotated[
        str | None, typer.Option(help="Model name for the OpenAI APIs (default: /v1/models).")
    ] = None,
    allow_inexact: Annotated[
        bool,
        typer.Option("--allow-inexact", help="openai-chat: also send items of fidelity text."),
    ] = False,
    overwrite: BenchOverwrite = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr.")
    ] = True,
    traffic: Annotated[
        BenchTraffic,
        typer.Option(
            help="per-source: a window per source; mixed: draws following the corpus mix, "
            "all sources in flight at once (the headline); both."
        ),
    ] = BenchTraffic.per_source,
    flush_cache: Annotated[
        bool,
        typer.Option(
            "--flush-cache",
            help="Empty the server's prefix cache before every window "
            "(SGLang /flush_cache, vLLM /reset_prefix_cache).",
        ),
    ] = False,
    mixed_requests: Annotated[
        int | None,
        typer.Option(help="Requests of a mixed window (default: the items sent).", min=1),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the mixed draws.")] = 0,
) -> None:
    """Replay a suite against a server: speed and speculative acceptance per source and cluster."""
    from distprompt import BenchInterrupted, bench

    try:
        res = bench(
            suite,
            url=url,
            api=api.value,
            out=out,
            concurrency=_int_list(concurrency, "--concurrency"),
            label=label,
            sources=[x.strip() for x in sources.split(",") if x.strip()] if sources else None,
            max_items=max_items,
            timeout=timeout,
            ignore_eos=ignore_eos,
            temperature=temperature,
            model=model,
            allow_inexact=allow_inexact,
            overwrite=overwrite,
            progress=progress and sys.stderr.isatty(),
            traffic=traffic.value,
            flush_cache=flush_cache,
            mixed_requests=mixed_requests,
            seed=seed,
        )
    except BenchInterrupted as exc:
        _state["interrupt_note"] = (
            f"kept the {len(exc.results)} finished requests in {out}, marked incomplete"
        )
        raise
    _bench_done(res, out)
    if not res.complete:
        raise typer.Exit(EXIT_DATA)


@app.command("bench-import", short_help="Join an AIPerf run back to the suite.")
def bench_import_cmd(
    aiperf_run_dir: Annotated[
        Path, typer.Argument(help="AIPerf artifact folder (holds profile_export.jsonl).")
    ],
    suite: Annotated[Path, typer.Option(help="The suite folder the AIPerf input came from.")],
    out: BenchOut,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Concurrency of the AIPerf run (default: from its config).", min=1),
    ] = None,
    label: Annotated[str | None, typer.Option(help="Name of the run (default: aiperf).")] = None,
    overwrite: BenchOverwrite = False,
) -> None:
    """Join an AIPerf run's per-request export back to the suite items and summarize it."""
    from distprompt import import_aiperf

    res = import_aiperf(
        aiperf_run_dir,
        suite=suite,
        out=out,
        concurrency=concurrency,
        label=label,
        overwrite=overwrite,
    )
    if res.meta.get("unmatched"):
        _warn(
            "records not joined to a suite item: "
            + ", ".join(f"{v} ({k})" for k, v in res.meta["unmatched"].items())
        )
    _bench_done(res, out)


@app.command("bench-compare", short_help="Speedup of a bench run over a baseline.")
def bench_compare_cmd(
    a: Annotated[Path, typer.Argument(help="Results folder of the run to judge (speculative).")],
    b: Annotated[Path | None, typer.Argument(help="Results folder of the baseline run.")] = None,
    baseline: Annotated[
        Path | None, typer.Option(help="Baseline results folder (instead of B).")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of markdown.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Compare runs that differ in suite, model, max_tokens, temperature, "
            "ignore_eos or traffic (the differences are printed).",
        ),
    ] = False,
) -> None:
    """Speedup of run A over baseline B per source and concurrency, with 95% intervals."""
    from distprompt import BenchResults, bench_compare, render_bench_compare
    from distprompt.errors import ConfigError

    base = baseline or b
    if base is None or (baseline is not None and b is not None):
        raise ConfigError("bench-compare: expected a baseline as B or --baseline (one of them)")
    cmp = bench_compare(BenchResults.load(a), BenchResults.load(base), force=force)
    if cmp["differences"]:
        _warn("compared runs that differ in " + "; ".join(cmp["differences"]))
    if json_out:
        import orjson

        typer.echo(orjson.dumps(cmp, option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(render_bench_compare(cmp))


# ---- end of bench ------------------------------------------------------------------------


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, raised in the main thread so every ``finally`` cleans up."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: Any) -> NoReturn:
    # A second signal must not cut the clean-up short (temp folders would be left behind).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _state["signal"] = signum  # typer swallows KeyboardInterrupt into an exit code of 130
    raise _Interrupted(signum)


class _StderrWarnings(logging.Handler):
    """Prints the library's warnings as ``warning: …`` lines while the CLI runs.

    Warnings of ``distprompt.pipeline`` already reach stderr through ``build_suite(warn=...)``, and
    with ``-v`` the root handler prints everything, so those are not printed twice.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _state["verbose"] or record.name == "distprompt.pipeline":
            return
        try:
            typer.echo(f"warning: {record.getMessage()}", err=True)
        except Exception:  # never let a warning turn into an error
            self.handleError(record)


def _interrupted(exc: BaseException | None) -> int:
    signum = getattr(exc, "signum", None) or _state.get("signal") or signal.SIGINT
    name = "terminated" if signum == signal.SIGTERM else "interrupted"
    note = _state.get("interrupt_note") or "no output folder was finished, temp files were removed"
    typer.echo(f"{name}: stopped; {note}", err=True)
    return 128 + int(signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``distprompt`` and ``python -m distprompt``; returns the exit code.

    Exit codes: 0 success, 2 a :class:`DistpromptError` (bad input, options, tokenizer or
    output; one ``error:`` line on stderr, the traceback only with ``-v``), 1 an internal error,
    130/143 interrupted by SIGINT/SIGTERM (after removing temp files; nothing that looks finished
    is left behind).
    """
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, _on_signal)
    log = logging.getLogger("distprompt")
    stderr_warnings = _StderrWarnings()
    log.addHandler(stderr_warnings)
    try:
        return _main(argv)
    finally:
        log.removeHandler(stderr_warnings)
        for sig, old in handlers.items():
            signal.signal(sig, old)


def _main(argv: list[str] | None) -> int:
    _state["verbose"] = False  # set again by the root callback when -v is given
    _state["signal"] = None
    _state["interrupt_note"] = None
    try:
        with cli_spelling():
            rv = app(args=argv, standalone_mode=False)
    except DistpromptError as exc:
        if _state["verbose"]:
            import traceback

            traceback.print_exc()
        typer.echo(f"error: {exc}", err=True)
        return EXIT_DATA
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        return _interrupted(None) if _state["signal"] is not None else 1
    except Exception as exc:  # click usage errors and the like
        # typer vendors click: usage errors are ClickException subclasses with show()/exit_code.
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            return int(exc.exit_code)  # type: ignore[attr-defined]
        # A bug, not bad input: one line, the traceback with -v.
        if _state["verbose"]:
            import traceback

            traceback.print_exc()
        typer.echo(
            f"error: internal error ({type(exc).__name__}: {exc}); this is a bug in distprompt — "
            "run again with -v for the traceback and report it",
            err=True,
        )
        return 1
    if _state["signal"] is not None:
        return _interrupted(None)
    # Without standalone mode, typer returns the code of a typer.Exit raised by a command (130
    # for a KeyboardInterrupt it caught) instead of raising it.
    if isinstance(rv, int) and not isinstance(rv, bool):
        return _interrupted(None) if rv == 130 else rv
    return 0


def run() -> None:
    """Console-script entry point (and ``python -m distprompt``'s)."""
    _keep_pandas_out()
    sys.exit(main())


def _keep_pandas_out() -> None:
    """In the command's own process: scikit-learn's ``utils.fixes`` imports pandas whenever it
    is installed (for output options distprompt does not use), which costs 76 MB and 0.6 s in
    the process that selects (measured with scikit-learn 1.9, pandas 2). Nothing in distprompt
    uses pandas, so that one import fails, and scikit-learn runs as it does without pandas;
    any other ``import pandas`` works. The library, in a user's own process, leaves it alone."""
    sys.meta_path.insert(0, _NoPandasForSklearn())


class _NoPandasForSklearn(importlib.abc.MetaPathFinder):
    """Refuses ``import pandas`` while ``sklearn.utils.fixes`` is being imported (see
    :func:`_keep_pandas_out`); finds nothing otherwise, leaving imports to the other finders."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas":
            fixes = sys.modules.get("sklearn.utils.fixes")
            if fixes is not None and getattr(fixes.__spec__, "_initializing", False):
                raise ModuleNotFoundError("pandas is not used by distprompt", name=name)
        return None
