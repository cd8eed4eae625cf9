"""One frozen, keyword-only configuration, validated before any shard is read.

Each field carries its metadata (an :class:`Option`: flag, help, reference text, group); the
CLI's options (``cli.py``) and the options tables of ``docs/reference.md``
(``scripts/gen_reference.py``) are generated from it, so an option is defined once, here.
"""

from __future__ import annotations

import importlib.util
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, Literal, get_args

from distprompt.errors import ConfigError

__all__ = [
    "ALLOCATIONS",
    "COMMAND_GROUPS",
    "ENGINES",
    "FORMATS",
    "GROUPS",
    "METHODS",
    "ON_ERROR",
    "PER_SOURCE",
    "RAY_INSTALL_HINT",
    "Allocation",
    "Config",
    "Engine",
    "Group",
    "Method",
    "OnError",
    "Option",
    "check_formats",
    "checked_formats",
    "options",
    "require_engine",
    "resolve",
]

#: Items from every source when neither ``per_source`` nor ``total`` is given.
PER_SOURCE = 50

#: How ``total`` is split between sources: by rows, by the square root of rows, or equally.
Allocation = Literal["proportional", "sqrt", "equal"]
#: How a source's representatives are chosen.
Method = Literal["herding", "kmedoids", "random"]
#: Stop at the first bad row, or skip bad rows and count them by reason.
OnError = Literal["raise", "skip"]
#: Where the pass runs.
Engine = Literal["local", "ray"]
#: What an option is about: the suite's selection, the checks of rows and tokenizer, how the
#: pass runs (shared by ``export`` and ``inspect``), or the output files.
Group = Literal["selection", "checks", "pass", "output"]

ALLOCATIONS: tuple[Allocation, ...] = get_args(Allocation)
METHODS: tuple[Method, ...] = get_args(Method)
ON_ERROR: tuple[OnError, ...] = get_args(OnError)
ENGINES: tuple[Engine, ...] = get_args(Engine)
GROUPS: tuple[Group, ...] = get_args(Group)
RAY_INSTALL_HINT = "pip install 'distprompt[ray]'"

#: The client formats a suite can be written in (the writers are in ``distprompt.write``).
FORMATS: tuple[str, ...] = (
    "openai",
    "vllm_custom",
    "sharegpt",
    "token_ids",
    "guidellm",
    "aiperf",
    "by_source",
)

#: Which groups of :class:`Config` options each command of the CLI takes.
COMMAND_GROUPS: dict[str, tuple[Group, ...]] = {"export": GROUPS, "inspect": ("pass",)}

_OPTION = "distprompt.option"


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """A :class:`Config` field as the CLI and ``docs/reference.md`` show it.

    Attributes:
        name: The field's name (the library's keyword).
        flag: The command-line spelling: ``--per-source``, ``--no-turns`` (with ``negate``),
            ``--progress/--no-progress``.
        help: The ``--help`` text.
        doc: The meaning in ``docs/reference.md`` (markdown); its first sentence is what the
            commands that share the option with ``export`` show.
        group: One of :data:`GROUPS`; :data:`COMMAND_GROUPS` says which commands take it.
        default: The field's default.
        cli_default: The default of the command-line option: ``None`` for an option whose
            absence lets the library decide (``--per-source`` beside ``--total``).
        doc_default: The default column of ``docs/reference.md``.
        metavar: The value's name in ``--help`` (None: typer's).
        min: The smallest value the command line accepts (None: no bound there).
        negate: The flag turns the field off (``--no-turns`` sets ``recover_turns=False``).
        recorded: The manifest records it (False for how the pass ran and the output files).

    Example:
        >>> options("pass")[0].flag
        '--workers'
    """

    name: str
    flag: str
    help: str
    doc: str
    group: Group
    default: Any
    cli_default: Any
    doc_default: str
    metavar: str | None = None
    min: float | None = None
    negate: bool = False
    recorded: bool = True

    @property
    def param(self) -> str:
        """The command's parameter name: the flag's first spelling in snake case."""
        return self.flag.split("/")[0].removeprefix("--").replace("-", "_")


def _meta(
    *,
    help: str,
    doc: str,
    group: Group,
    flag: str | None = None,
    cli_default: Any = MISSING,
    doc_default: str | None = None,
    metavar: str | None = None,
    min: float | None = None,
    negate: bool = False,
    recorded: bool = True,
) -> dict[str, Any]:
    """The metadata of a :class:`Config` field: its :class:`Option` but for what
    :func:`options` derives from the field (name, default; flag, CLI and docs default unless
    given)."""
    return {
        _OPTION: {
            "flag": flag,
            "help": help,
            "doc": doc,
            "group": group,
            "cli_default": cli_default,
            "doc_default": doc_default,
            "metavar": metavar,
            "min": min,
            "negate": negate,
            "recorded": recorded,
        }
    }


def _doc_default(default: Any, negate: bool) -> str:
    if isinstance(default, bool):
        return "off" if default is negate else "on"
    if default is None:
        return "none"
    if isinstance(default, str):
        return f"`{default}`"
    return str(default)


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Options of a suite build, validated here before any shard is read.

    Each field's metadata is its :class:`Option` (see :func:`options`): the CLI's flags and
    ``docs/reference.md``'s tables are generated from it.

    Attributes:
        per_source: Items from every source. Set to None when ``total`` is given.
        total: Total items, split between sources by ``allocation``.
        allocation: ``proportional`` (to rows), ``sqrt`` or ``equal``; with ``total``.
        min_per_source: Floor per source; only with ``total`` (refused without it).
        max_candidates: Unique prompts kept per source for selection (bounds memory).
        seed: Seeds every random choice; same input and seed give byte-identical output.
        on_error: ``raise`` at the first bad row, or ``skip`` bad rows and count them by reason.
        method: ``herding`` (default), ``kmedoids`` or ``random``.
        near_duplicate: TF-IDF cosine at which two prompts count as near-duplicates.
        lsa_dims: Dimensions of the LSA content vectors selection works in.
        length_weight: Weight of the log prompt length beside the content vectors.
        max_output_tokens: Cap on each item's ``max_tokens``.
        formats: Client formats to write (a sequence, or one comma-separated string); None
            writes all of :data:`FORMATS`.
        temperature: Sampling temperature set in every client file and command (0: greedy).
        ignore_eos: Ask the clients to generate ``max_tokens`` past EOS (forced lengths).
        workers: Processes reading shards in parallel. On a corpus of 64 MiB or more (a
            compressed shard counts as 4x its size on disk) the sources are selected in
            parallel after the pass: in two threads with 1 or 2, in as many processes with more
            (more memory). Does not change the result.
        glob: Which files of each DATA folder are shards (see
            :func:`distprompt.read.shards.find_shards`).
        engine: ``local`` (this machine) or ``ray`` (Ray tasks; ``pip install
            'distprompt[ray]'``); does not change the result.
        ray_address: The Ray cluster for ``engine="ray"``; None starts or joins a local Ray.
        recover_turns: Recover chat ``messages`` and check fidelity (needs a chat template).
        check_tokenizer: Refuse a tokenizer that fails the checks ``inspect`` runs; False builds
            the suite anyway and records the failed verdict in the manifest.
        overwrite: Replace the output folder when it holds a previous distprompt output.
        progress: Progress bars on stderr.

    Example:
        >>> Config(total=100, per_source=None, allocation="sqrt").allocation
        'sqrt'
    """

    per_source: int | None = field(
        default=PER_SOURCE,
        metadata=_meta(
            help="Items from every source (default 50); not with --total.",
            doc="Items from every source; not with `--total` (both: exit 2).",
            group="selection",
            cli_default=None,  # absent: 50, unless --total replaces it
            metavar="N",
            min=1,
        ),
    )
    total: int | None = field(
        default=None,
        metadata=_meta(
            help="Total items, split between sources by --allocation.",
            doc="Total items, split between sources by `--allocation`.",
            group="selection",
            min=1,
        ),
    )
    allocation: Allocation = field(
        default="proportional",
        metadata=_meta(
            help="How --total is split: by rows, sqrt of rows, or equally.",
            doc="How `--total` is split: `proportional` to rows, `sqrt` of rows, or `equal`.",
            group="selection",
        ),
    )
    min_per_source: int = field(
        default=0,
        metadata=_meta(
            help="Floor per source; only with --total.",
            doc="Floor per source; only with `--total` (without it: exit 2).",
            group="selection",
            min=0,
        ),
    )
    max_candidates: int = field(
        default=20000,
        metadata=_meta(
            help="Unique prompts kept per source for selection (bounds memory).",
            doc="Unique prompts kept per source for selection (bounds memory; on a corpus of 64 "
            "MiB or more their feature windows are kept in a temporary file in `TMPDIR`, about 1 "
            "KB a candidate, see [concepts](concepts.md)).",
            group="selection",
            min=1,
        ),
    )
    seed: int = field(
        default=0,
        metadata=_meta(
            help="Seed; same input and seed => same files.",
            doc="Seed; same input and seed give byte-identical files.",
            group="selection",
            min=0,
        ),
    )
    on_error: OnError = field(
        default="raise",
        metadata=_meta(
            help="raise: stop at the first bad row (exit 2); skip: count and skip bad rows.",
            doc="`raise`: stop at the first bad row (exit 2); `skip`: count and skip bad rows.",
            group="checks",
        ),
    )
    method: Method = field(
        default="herding",
        metadata=_meta(
            help="Selection method within a source.",
            doc="Selection within a source: `herding`, `kmedoids` or `random` (see "
            "[concepts](concepts.md)).",
            group="selection",
        ),
    )
    # 0.9 also caught prompts that only share a long system prompt (docs/concepts.md)
    near_duplicate: float = field(
        default=0.95,
        metadata=_meta(
            help="TF-IDF cosine at which two prompts count as near-duplicates.",
            doc="TF-IDF cosine at which two prompts count as near-duplicates.",
            group="selection",
            min=0,
        ),
    )
    lsa_dims: int = field(
        default=64,
        metadata=_meta(
            help="Dimensions of the LSA content vectors selection uses.",
            doc="Dimensions of the LSA content vectors selection works in.",
            group="selection",
            min=1,
        ),
    )
    length_weight: float = field(
        default=1.0,
        metadata=_meta(
            help="Weight of the log prompt length beside the content vectors.",
            doc="Weight of the log prompt length beside the content vectors (0: content only).",
            group="selection",
            min=0,
        ),
    )
    max_output_tokens: int | None = field(
        default=None,
        metadata=_meta(
            help="Cap on each item's max_tokens.",
            doc="Cap on each item's `max_tokens`.",
            group="selection",
            min=1,
        ),
    )
    formats: tuple[str, ...] | None = field(
        default=None,
        metadata=_meta(
            help="Comma-separated client formats (default: all).",
            doc="Comma-separated client formats: "
            + ", ".join(f"`{f}`" for f in FORMATS)
            + " (see [formats](formats.md)).",
            group="output",
            doc_default="all",
            recorded=False,
        ),
    )
    temperature: float = field(
        default=0.0,
        metadata=_meta(
            help="Sampling temperature set in every client file and command.",
            doc="Sampling temperature set in every client file and `RUN.md` command (0: greedy).",
            group="output",
            min=0,
            recorded=False,
        ),
    )
    ignore_eos: bool = field(
        default=False,
        metadata=_meta(
            help="Client files ask for max_tokens past EOS (forced lengths).",
            doc="The client files and commands ask for `max_tokens` past EOS (forced output "
            "lengths).",
            group="output",
            recorded=False,
        ),
    )
    workers: int = field(
        default=1,
        metadata=_meta(
            help="Processes reading shards in parallel (large shards in byte ranges); on a large "
            "corpus, 2 or more also select sources in parallel (more memory).",
            doc="Processes reading shards in parallel; large plain shards are split into byte "
            "ranges at line starts, so one large shard keeps every worker busy. On a corpus of "
            "64 MiB or more (a `.gz` or `.zst` shard counts as 4× its size on disk) the sources "
            "are selected in parallel after the pass, largest first, while this process runs the "
            "tokenizer checks and decodes the ones done: with 1 or 2 workers in two threads of "
            "this process (no extra memory; two large pools are not selected at once), with 3 or "
            "more in as many worker processes (each holds one source's selection: ~150–250 MB on "
            "the benchmark corpus). With one worker, on such a corpus the pass also reads the "
            "smallest shards first while one thread selects and decodes each source whose shards "
            "are read (used only if no later row or quota change touched it; the verbose log "
            "says how many). With several workers, a compressed shard too large to split is read "
            "first. The result does not change. (On such a corpus the report's plots are drawn "
            "in a fresh process, whatever `--workers`, while the last items are decoded.)",
            group="pass",
            min=1,
            recorded=False,
        ),
    )
    glob: str | None = field(
        default=None,
        metadata=_meta(
            help="Which files of a DATA folder are shards, relative to it (e.g. "
            "'*/tokenized_data.jsonl'). Default: the tokenized_data.* files when the folder "
            "holds any, else every *.jsonl*, *.parquet and *.arrow file (one format per folder).",
            doc="Which files of a DATA folder are shards, relative to it (e.g. "
            "`'*/tokenized_data.jsonl'`; `*` stays in a folder, `**` spans folders, a pattern "
            "without `/` matches file names). Default: the `tokenized_data.*` files when the "
            "folder holds any, else every `*.jsonl*`, `*.parquet` and `*.arrow` file (a folder "
            "holding both JSON Lines and Parquet/Arrow shards is refused: choose one with "
            "`--glob`).",
            group="pass",
            metavar="PATTERN",
        ),
    )
    engine: Engine = field(
        default="local",
        metadata=_meta(
            help="Where the pass runs: local (this machine, --workers processes) or ray (one Ray "
            "task per shard; pip install 'distprompt[ray]'). Same result either way.",
            doc="Where the pass runs: `local` (this machine, `--workers` processes) or `ray` (one "
            "Ray task per shard or byte range of a large shard, merged on this machine, "
            "`--workers` unused; needs `pip install 'distprompt[ray]'`). The files are the same "
            "byte for byte; see [scale](scale.md).",
            group="pass",
            recorded=False,
        ),
    )
    ray_address: str | None = field(
        default=None,
        metadata=_meta(
            help="Ray cluster for --engine ray (auto, host:6379, ray://host:10001); default: "
            "RAY_ADDRESS, else start or join a Ray on this machine.",
            doc="Ray cluster for `--engine ray`: `auto`, `host:6379` or `ray://host:10001`. "
            "Default: `RAY_ADDRESS`, else a Ray started with `ray start` on this machine, else a "
            "new local Ray on 127.0.0.1.",
            group="pass",
            recorded=False,
        ),
    )
    recover_turns: bool = field(
        default=True,
        metadata=_meta(
            flag="--no-turns",
            help="Skip chat-turn recovery.",
            doc="Skip chat-turn recovery (items then have no `messages`).",
            group="checks",
            negate=True,
        ),
    )
    # False writes a suite even when the tokenizer checks fail (the verdict is recorded).
    check_tokenizer: bool = field(
        default=True,
        metadata=_meta(
            flag="--no-tokenizer-check",
            help="Write the suite even when the tokenizer fails inspect's checks; the failed "
            "verdict is recorded in manifest.json and on top of RUN.md and the report.",
            doc="Write the suite even when the tokenizer fails the checks below; the failed "
            "verdict goes into `manifest.json` (`tokenizer_check`), on top of `RUN.md` and of "
            "the report, and into the last line on stderr.",
            group="checks",
            negate=True,
        ),
    )
    overwrite: bool = field(
        default=False,
        metadata=_meta(
            help="Replace OUT when it holds a previous distprompt output.",
            doc="Replace a previous distprompt output (a folder with `manifest.json`); a folder of "
            "other files is never deleted.",
            group="output",
            recorded=False,
        ),
    )
    progress: bool = field(
        default=False,
        metadata=_meta(
            flag="--progress/--no-progress",
            help="Progress bar on stderr.",
            doc="Progress bar on stderr (only when stderr is a terminal).",
            group="output",
            cli_default=True,  # the library is quiet by default, the command is not
            doc_default="`--progress`",
            recorded=False,
        ),
    )

    def __post_init__(self) -> None:
        if self.total is not None and self.per_source is not None:
            # total wins over the per_source default; the library sets per_source=None for it.
            raise ConfigError("expected either per_source or total, found both; pass one of them")
        if self.total is None and self.per_source is None:
            raise ConfigError("expected per_source or total, found neither")
        if self.total is None and self.min_per_source:
            # a floor of total's split: with per_source every source gets per_source anyway
            raise ConfigError(
                f"expected min_per_source with total (a floor of its split between sources), "
                f"found min_per_source={self.min_per_source!r} with per_source="
                f"{self.per_source!r}; pass total, or leave min_per_source out"
            )
        for name in ("per_source", "total"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"expected {name} to be a positive integer, found {v!r}")
        # a frozen record holds a tuple; the CLI passes one comma-separated string
        object.__setattr__(self, "formats", _formats(self.formats))
        checks: list[tuple[str, bool, str]] = [
            ("allocation", self.allocation in ALLOCATIONS, f"one of {', '.join(ALLOCATIONS)}"),
            ("on_error", self.on_error in ON_ERROR, f"one of {', '.join(ON_ERROR)}"),
            ("method", self.method in METHODS, f"one of {', '.join(METHODS)}"),
            (
                "min_per_source",
                _is_int(self.min_per_source) and self.min_per_source >= 0,
                "an integer >= 0",
            ),
            (
                "max_candidates",
                _is_int(self.max_candidates) and self.max_candidates >= 1,
                "an integer >= 1",
            ),
            ("seed", _is_int(self.seed) and 0 <= self.seed < 2**63, "an integer in [0, 2**63)"),
            (
                "max_output_tokens",
                self.max_output_tokens is None
                or (_is_int(self.max_output_tokens) and self.max_output_tokens >= 1),
                "None or an integer >= 1",
            ),
            (
                "near_duplicate",
                _is_number(self.near_duplicate) and 0.0 < self.near_duplicate <= 1.0,
                "a number in (0, 1]",
            ),
            ("lsa_dims", _is_int(self.lsa_dims) and self.lsa_dims >= 1, "an integer >= 1"),
            (
                "length_weight",
                _is_number(self.length_weight) and self.length_weight >= 0.0,
                "a number >= 0",
            ),
            (
                "temperature",
                _is_number(self.temperature)
                and math.isfinite(self.temperature)
                and self.temperature >= 0.0,
                "a finite number >= 0",
            ),
            ("workers", _is_int(self.workers) and self.workers >= 1, "an integer >= 1"),
            (
                "glob",
                self.glob is None or (isinstance(self.glob, str) and bool(self.glob.strip())),
                "None or a non-empty pattern",
            ),
            (
                "ray_address",
                self.ray_address is None or isinstance(self.ray_address, str),
                "None or an address",
            ),
        ]
        checks += [
            (name, isinstance(getattr(self, name), bool), "True or False")
            for name in ("ignore_eos", "recover_turns", "check_tokenizer", "overwrite", "progress")
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(
                    f"expected {name} to be {expected}, found {getattr(self, name)!r}"
                )
        require_engine(self.engine)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def recorded(self) -> dict[str, Any]:
        """The options that decide what a suite holds, as its manifest records them: not how
        the pass ran (workers, engine) nor how the files are written (formats, temperature …).

        Example:
            >>> "workers" in Config().recorded(), "seed" in Config().recorded()
            (False, True)
        """
        return {o.name: getattr(self, o.name) for o in options() if o.recorded}


def options(*groups: Group) -> tuple[Option, ...]:
    """The :class:`Option` of every :class:`Config` field (of ``groups`` only, when given), in
    the order of the fields, which is the order of ``--help`` and ``docs/reference.md``.

    Example:
        >>> [o.flag for o in options("pass")]
        ['--workers', '--glob', '--engine', '--ray-address']
    """
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ConfigError(f"expected groups among {', '.join(GROUPS)}, found {', '.join(unknown)}")
    out = []
    for f in fields(Config):
        meta = dict(f.metadata[_OPTION])
        if groups and meta["group"] not in groups:
            continue
        if meta["flag"] is None:
            meta["flag"] = "--" + f.name.replace("_", "-")
        if meta["cli_default"] is MISSING:
            meta["cli_default"] = not f.default if meta["negate"] else f.default
        if meta["doc_default"] is None:
            meta["doc_default"] = _doc_default(f.default, meta["negate"])
        out.append(Option(name=f.name, default=f.default, **meta))
    return tuple(out)


def resolve(config: Config | None = None, /, **overrides: Any) -> Config:
    """``config`` (default: ``Config()``) with ``overrides`` applied and validated.

    A ``total`` given without ``per_source`` replaces the ``per_source`` default.

    Raises:
        ConfigError: An unknown option, or an invalid value.

    Example:
        >>> resolve(total=100).per_source is None
        True
    """
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(
            f"expected options among {', '.join(sorted(known))}, found {', '.join(unknown)}"
        )
    if overrides.get("total") is not None and "per_source" not in overrides:
        overrides["per_source"] = None
    return replace(config if config is not None else Config(), **overrides)


def require_engine(engine: str) -> None:
    """Check that ``engine`` is known and, for ``ray``, installed — before any shard is read.

    Raises:
        ConfigError: An unknown engine, or ``ray`` without Ray installed.

    Example:
        >>> require_engine("local")
    """
    if engine not in ENGINES:
        raise ConfigError(f"expected engine to be one of {', '.join(ENGINES)}, found {engine!r}")
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "expected Ray for engine 'ray', found it is not installed; install it with "
            f"{RAY_INSTALL_HINT} (or pip install ray), or use the local engine"
        )


def check_formats(formats: Sequence[str]) -> None:
    """Refuse unknown format names before anything is written.

    Raises:
        ConfigError: A name is not one of :data:`FORMATS`.

    Example:
        >>> check_formats(["openai", "sharegpt"])
    """
    if isinstance(formats, str):
        formats = [formats]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError(
            f"formats: expected names from {', '.join(FORMATS)}, "
            f"found {', '.join(map(repr, unknown))}; fix the format list"
        )


def checked_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """The format names in the given order, each once, after :func:`check_formats`.

    Example:
        >>> checked_formats(["openai", "openai", "guidellm"])
        ('openai', 'guidellm')
    """
    if isinstance(formats, str):
        formats = [formats]
    seen: dict[str, None] = {}
    for f in formats:
        seen.setdefault(f, None)
    fmts = tuple(seen)
    check_formats(fmts)
    return fmts


def _formats(formats: object) -> tuple[str, ...] | None:
    """``Config.formats`` as a checked tuple: a string is a comma-separated list."""
    if formats is None:
        return None
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    if isinstance(formats, Iterable):
        formats = tuple(formats)
    if not isinstance(formats, tuple) or not all(isinstance(f, str) for f in formats):
        raise ConfigError(
            f"expected formats to be None or names from {', '.join(FORMATS)}, found {formats!r}"
        )
    return checked_formats(formats)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)
