"""The manifest as typed frozen records: what an export read, checked, chose and wrote.

:func:`distprompt.pipeline.manifest.build_manifest` makes a :class:`Manifest`; ``Suite`` carries
it, writes :meth:`Manifest.to_dict` as ``manifest.json`` and reads it back with
:meth:`Manifest.from_dict`. Readers use attributes (``suite.manifest.sources["a"].rows``), not
``.get`` chains over a dict: a renamed key is then a type error, not a silent default.

Every record keeps what the JSON said beyond what it knows: keys a newer version added go to
``extra`` and come back out of ``to_dict`` unchanged, and keys an older version did not write
are listed in ``absent`` (their fields read as the default: 0, empty, None) and are left out of
``to_dict`` again, so a file read and written again is the same JSON. Two keys are written only
when they apply (``counts.failed_shards``, ``files``): None there means "not written".

This module imports no step (like ``records``), so the output side, ``simulate`` and the bench
can all read a manifest.

Example:
    >>> m = Manifest.from_dict({"counts": {"rows": 3, "items": 2}, "new_key": 1})
    >>> m.counts.rows, m.extra["new_key"], m.to_dict()
    (3, 1, {'counts': {'rows': 3, 'items': 2}, 'new_key': 1})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "CheckEntry",
    "CorpusEntry",
    "Counts",
    "Design",
    "FidelityIssue",
    "Manifest",
    "ManifestTokenizer",
    "Quantiles",
    "Residual",
    "ShardEntry",
    "SourceEntry",
    "TokenizerCheck",
]

R = TypeVar("R", bound="_JsonRecord")

#: Field metadata: how a JSON value becomes the field's value (default: as it is).
_DECODE = "decode"
#: Field metadata: the key is written only when the value is not None.
_WHEN_SET = "when_set"


def _decoding(decode: Callable[[Any], Any], *, when_set: bool = False) -> dict[str, Any]:
    """A field's metadata: read from JSON with ``decode``; with ``when_set``, its key is
    written only when the value is not None."""
    return {_DECODE: decode, _WHEN_SET: when_set}


def _encode(value: Any) -> Any:
    """A field's value as JSON: records through ``to_dict``, tuples as lists, mappings copied."""
    if isinstance(value, _JsonRecord):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    return value


class _JsonRecord:
    """What every manifest record shares: ``to_dict``/``from_dict`` over its fields in order
    (a field's name is its key), with ``extra`` and ``absent`` as the module docstring says."""

    __slots__ = ()
    extra: Mapping[str, Any]
    absent: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The record as its JSON object, keys in the order the record was always written."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name in ("extra", "absent") or f.name in self.absent:
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata.get(_WHEN_SET):
                continue
            out[f.name] = _encode(value)
        out.update((k, _encode(v)) for k, v in self.extra.items())
        return out

    @classmethod
    def from_dict(cls: type[R], d: Mapping[str, Any]) -> R:
        """The record from its JSON object, written by this version or an earlier or later one.

        Raises:
            TypeError: ``d`` is not a JSON object.
        """
        if not isinstance(d, Mapping):
            raise TypeError(f"{cls.__name__}: expected a JSON object, found {type(d).__name__}")
        kwargs: dict[str, Any] = {}
        absent = []
        names = set()
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in ("extra", "absent"):
                continue
            names.add(f.name)
            if f.name in d:
                decode = f.metadata.get(_DECODE)
                kwargs[f.name] = decode(d[f.name]) if decode else d[f.name]
            elif not f.metadata.get(_WHEN_SET):
                absent.append(f.name)
        kwargs["extra"] = {k: v for k, v in d.items() if k not in names}
        kwargs["absent"] = tuple(absent)
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class Quantiles(_JsonRecord):
    """Exact quantiles of a length histogram (tokens); an empty histogram has none (all absent)."""

    min: int | None = None
    p50: int | None = None
    p90: int | None = None
    p99: int | None = None
    max: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, values: list[int]) -> Quantiles:
        """The record of :func:`~distprompt.records.histogram_quantiles` at 0, .5, .9, .99, 1
        (``[]`` for an empty histogram: every key absent)."""
        keys = ("min", "p50", "p90", "p99", "max")
        return cls.from_dict(dict(zip(keys, values, strict=False)))


@dataclass(frozen=True, slots=True)
class Residual(_JsonRecord):
    """How far a source's weighted totals are from the corpus's, ``(weighted - corpus) /
    corpus`` (None when the corpus total is 0)."""

    rows: float | None = None
    prompt_tokens: float | None = None
    first_reply_tokens: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class Design(_JsonRecord):
    """A source's sampling design as written: items per stratum (``take-all``, ``len1`` …),
    the rows they stand for, the take-all rows (``shard:line``), the share of the source's
    first-reply tokens the take-all rows hold, and the residual."""

    strata: Mapping[str, int] = field(default_factory=dict)
    rows_represented: Mapping[str, float] = field(default_factory=dict)
    take_all: tuple[str, ...] = field(default=(), metadata=_decoding(tuple))
    take_all_reply_share: float | None = None
    residual: Residual = field(default_factory=Residual, metadata=_decoding(Residual.from_dict))
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class SourceEntry(_JsonRecord):
    """A source's entry (``sources.<name>``): its rows and unique prompts, the candidates kept
    for selection, the quota (``target``) and the items ``selected``, length quantiles, how its
    items were recovered (``fidelity``, ``structure``, ``ambiguities``: counts by kind) and its
    sampling design. ``response_tokens`` is the whole rest of each row; ``first_reply_tokens``
    the first assistant span (what ``max_tokens`` asks for)."""

    rows: int = 0
    unique_prompts: int = 0
    unique_exact: bool = True
    duplicate_rows: int = 0
    candidates: int = 0
    target: int = 0
    selected: int = 0
    prompt_tokens: Quantiles = field(
        default_factory=Quantiles, metadata=_decoding(Quantiles.from_dict)
    )
    response_tokens: Quantiles = field(
        default_factory=Quantiles, metadata=_decoding(Quantiles.from_dict)
    )
    first_reply_tokens: Quantiles = field(
        default_factory=Quantiles, metadata=_decoding(Quantiles.from_dict)
    )
    fidelity: Mapping[str, int] = field(default_factory=dict)
    structure: Mapping[str, int] = field(default_factory=dict)
    ambiguities: Mapping[str, int] = field(default_factory=dict)
    design: Design = field(default_factory=Design, metadata=_decoding(Design.from_dict))
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class ManifestTokenizer(_JsonRecord):
    """The tokenizer the suite was decoded with: what was passed (``name``), its ``kind``
    (``folder``, ``file``, ``hub``), the sha256 of its ``tokenizer.json`` (None without one)."""

    name: str = ""
    kind: str = ""
    sha256: str | None = None
    vocab_size: int = 0
    has_chat_template: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class ShardEntry(_JsonRecord):
    """A shard read: its name, its size in bytes and the valid rows it held."""

    name: str = ""
    bytes: int = 0
    rows: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


def _decode_shards(values: Any) -> tuple[ShardEntry, ...]:
    return tuple(ShardEntry.from_dict(v) for v in values)


@dataclass(frozen=True, slots=True)
class CorpusEntry(_JsonRecord):
    """DATA's fingerprint (sha256 over the shards' names and sizes), its shards, and the files
    discovery left out (``ignored``)."""

    fingerprint: str = ""
    shards: tuple[ShardEntry, ...] = field(default=(), metadata=_decoding(_decode_shards))
    ignored: tuple[str, ...] = field(default=(), metadata=_decoding(tuple))
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class Counts(_JsonRecord):
    """The valid rows, the items, the bad rows skipped by reason (and the first ``shard:line``
    of each), the anomalies counted, and the shards left out after their task kept failing
    (None, not written, when none was)."""

    rows: int = 0
    items: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)
    first_skipped: Mapping[str, str] = field(default_factory=dict)
    anomalies: Mapping[str, int] = field(default_factory=dict)
    failed_shards: Mapping[str, str] | None = field(
        default=None, metadata=_decoding(dict, when_set=True)
    )
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class CheckEntry(_JsonRecord):
    """One tokenizer check: ``passed`` (None when it could not run), rows checked and failed,
    the first failure's ``shard:line``, failures per source, and one readable sentence."""

    passed: bool | None = None
    checked: int = 0
    failed: int = 0
    first: str | None = None
    by_source: Mapping[str, int] = field(default_factory=dict)
    detail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


def _decode_checks(d: Any) -> dict[str, CheckEntry]:
    return {k: CheckEntry.from_dict(v) for k, v in d.items()}


@dataclass(frozen=True, slots=True)
class TokenizerCheck(_JsonRecord):
    """The tokenizer checked against the data (``tokenizer_check``): the verdict, whether it
    was enforced, why it failed (``mismatch``), the markers learned, and each check by name."""

    passed: bool = True
    enforced: bool = True
    mismatch: str | None = None
    start_markers: str = ""
    generation_prompt: str = ""
    checks: Mapping[str, CheckEntry] = field(
        default_factory=dict, metadata=_decoding(_decode_checks)
    )
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class FidelityIssue(_JsonRecord):
    """An item that is not token-exact: its id, source, fidelity and why."""

    id: str = ""
    source: str = ""
    fidelity: str | None = None
    reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)


def _decode_sources(d: Any) -> dict[str, SourceEntry]:
    return {k: SourceEntry.from_dict(v) for k, v in d.items()}


def _decode_check(d: Any) -> TokenizerCheck | None:
    return None if d is None else TokenizerCheck.from_dict(d)


def _decode_issues(values: Any) -> tuple[FidelityIssue, ...]:
    return tuple(FidelityIssue.from_dict(v) for v in values)


def _decode_files(d: Any) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in d.items()}


def _decode_data(d: Any) -> str | tuple[str, ...]:
    return d if isinstance(d, str) else tuple(d)


@dataclass(frozen=True, slots=True)
class Manifest(_JsonRecord):
    """``manifest.json``: versions, the recorded options (``config``), DATA as given and its
    fingerprint and shards (``corpus``), the tokenizer and its check, the counts, each source's
    entry (sorted by name), the warnings, what was learned from the chat template
    (``template``, None without turn recovery), the items that are not token-exact, and the
    files written (``files``: set by ``Suite.save``; None before).

    ``config``, ``versions`` and ``template`` stay JSON objects: they are recorded for a reader
    of the file, and no step reads them back.

    Example:
        >>> Manifest().to_dict()["counts"]
        {'rows': 0, 'items': 0, 'skipped': {}, 'first_skipped': {}, 'anomalies': {}}
    """

    distprompt_version: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    data: str | tuple[str, ...] = field(default="", metadata=_decoding(_decode_data))
    tokenizer: ManifestTokenizer = field(
        default_factory=ManifestTokenizer, metadata=_decoding(ManifestTokenizer.from_dict)
    )
    corpus: CorpusEntry = field(
        default_factory=CorpusEntry, metadata=_decoding(CorpusEntry.from_dict)
    )
    counts: Counts = field(default_factory=Counts, metadata=_decoding(Counts.from_dict))
    tokenizer_check: TokenizerCheck | None = field(default=None, metadata=_decoding(_decode_check))
    sources: Mapping[str, SourceEntry] = field(
        default_factory=dict, metadata=_decoding(_decode_sources)
    )
    warnings: tuple[str, ...] = field(default=(), metadata=_decoding(tuple))
    template: Mapping[str, Any] | None = None
    fidelity_issues: tuple[FidelityIssue, ...] = field(
        default=(), metadata=_decoding(_decode_issues)
    )
    files: Mapping[str, tuple[str, ...]] | None = field(
        default=None, metadata=_decoding(_decode_files, when_set=True)
    )
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)
    absent: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def empty(cls) -> Manifest:
        """A manifest that says nothing (``to_dict()`` is ``{}``): for a suite made from items
        alone (``Suite.from_hf`` without one)."""
        return cls.from_dict({})

    def with_files(self, files: Mapping[str, tuple[str, ...]]) -> Manifest:
        """The same manifest listing the files written (``Suite.save`` sets it)."""
        return dataclasses.replace(self, files=dict(files))
