"""Typed records passed between pipeline stages. Dicts appear only at the JSON edges.

The pass hands on per-source :class:`SourceStats` (exact, mergeable histograms, read with
:func:`histogram_quantiles`) and :class:`Candidate` pools; the output side reads them from here,
not from the reader.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from distprompt.read.spill import SpilledWindow

__all__ = [
    "FEATURE_HEAD",
    "FEATURE_TAIL",
    "REPLY_FEATURES",
    "REPLY_SCALE",
    "SHARD_PATTERNS",
    "SHARD_SUFFIXES",
    "TABLE_SUFFIXES",
    "UNSUPPORTED_SUFFIXES",
    "Ambiguity",
    "Candidate",
    "Provenance",
    "Row",
    "Shard",
    "SourceStats",
    "SuiteItem",
    "feature_window",
    "histogram_quantiles",
    "is_shard_file",
    "max_tokens_for",
    "max_tokens_histogram",
]


SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
#: Columnar shards (:mod:`distprompt.read.table`): Parquet files, and the Arrow files of a
#: ``datasets.save_to_disk`` folder.
TABLE_SUFFIXES = (".parquet", ".arrow")
#: The shard names discovery looks for, as messages spell them.
SHARD_PATTERNS = "*.jsonl, *.jsonl.gz, *.jsonl.zst, *.parquet or *.arrow"
#: Suffixes of compressions distprompt does not read: named explicitly, they are refused clearly
#: instead of being parsed as garbage.
UNSUPPORTED_SUFFIXES = (".bz2", ".xz", ".lz4", ".zip", ".7z", ".br", ".snappy", ".lzma", ".tar")


@dataclass(frozen=True, slots=True)
class Shard:
    """A shard file and the name provenance uses for it."""

    path: Path
    name: str  # relative to DATA, with "/"
    size: int
    url: str | None = None  # an fsspec URL (s3://…) that is read instead of path (see remote.py)


def is_shard_file(p: Path) -> bool:
    """Whether ``p`` is named like a shard (``*.jsonl``, ``*.jsonl.gz``, ``*.jsonl.zst``, or a
    table: ``*.parquet``, ``*.arrow``)."""
    return p.name.endswith(SHARD_SUFFIXES) or p.name.lower().endswith(TABLE_SUFFIXES)


@dataclass(frozen=True, slots=True, order=True)
class Provenance:
    """Where a row lives: enough to seek straight back to it.

    Attributes:
        shard: Path of the shard relative to DATA, with ``/`` separators.
        line: 1-based line number (of a Parquet or Arrow shard: 1-based row number).
        offset: Byte offset of the line start in the (uncompressed) stream (of a Parquet or
            Arrow shard: the 0-based row index, ``line - 1``).
    """

    shard: str
    line: int
    offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"shard": self.shard, "line": self.line, "offset": self.offset}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        return cls(shard=str(d["shard"]), line=int(d["line"]), offset=int(d["offset"]))


@dataclass(frozen=True, slots=True, eq=False)
class Row:
    """One validated training row, stamped with its provenance by the reader."""

    source: str
    input_ids: np.ndarray  # int64, 1-D
    loss_mask: np.ndarray  # int8, 1-D, values 0/1
    seq_len: int
    n_prompt_tokens: int
    n_response_tokens: int
    provenance: Provenance

    @property
    def prompt_ids(self) -> np.ndarray:
        return self.input_ids[: self.n_prompt_tokens]


#: Features are computed from at most this many tokens at the start and at the end of a prompt.
FEATURE_HEAD = 256
FEATURE_TAIL = 256


def feature_window(prompt_ids: np.ndarray) -> np.ndarray:
    """The tokens selection features are computed from: the whole prompt when it is short,
    else its first :data:`FEATURE_HEAD` and last :data:`FEATURE_TAIL` tokens (the system prompt
    and tools at the start, the task and the latest turns at the end). Bounds the memory of a
    pool and the cost of its features whatever the prompt lengths."""
    n = prompt_ids.shape[0]
    if n <= FEATURE_HEAD + FEATURE_TAIL:
        return prompt_ids
    return np.concatenate([prompt_ids[:FEATURE_HEAD], prompt_ids[n - FEATURE_TAIL :]])


#: What :func:`distprompt.replies.reply_features` measures of a first reply, in its order
#: (shares in ``[0, 1]``).
REPLY_FEATURES = (
    "seen2",
    "seen4",
    "distinct",
    "lookup",
    "lookup_run",
    "seen1",
    "seen3",
    "ngram[1-3]k4_steps",
    "ngram[1-3]k4_drafted",
    "ngram[2-5]k4_steps",
    "ngram[2-5]k4_drafted",
    "suffixlike_k8_steps",
    "suffixlike_k8_drafted",
)
#: Reply features are kept as uint16 shares of this (2 bytes a feature and candidate; all
#: 65535 marks a candidate not measured).
REPLY_SCALE = 65535


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """A unique prompt kept in a source's candidate pool.

    ``key`` is a 64-bit hash of the prompt ids: the pool is a bottom-k sample on it, so the pool
    does not depend on shard order and exact duplicates collapse onto one candidate.

    A pool read from plain shards holds only what selection needs (``window``, the lengths and
    the provenance): ``prompt_ids``, ``prompt_mask`` and ``response_ids`` are None and are read
    back from the shard for the candidates selected
    (:func:`distprompt.read.readback.load_candidates`).
    """

    key: int
    source: str
    prompt_ids: np.ndarray | None  # int32; None: not held, read back when needed
    prompt_mask: np.ndarray | None  # int8: loss_mask over the prompt span (earlier trained turns)
    response_ids: np.ndarray | None  # int32: the first assistant span after the prompt
    n_response_tokens: int
    provenance: Provenance  # one of the prompt's rows, drawn at random (read.pools._rank_of)
    count: int = 1  # rows carrying this exact prompt
    # feature_window(prompt ids), or where it is in the pass's window store (read back when
    # the source is selected: distprompt.read.spill); None: from prompt_ids
    window: np.ndarray | SpilledWindow | None = None
    n_prompt: int = -1  # prompt length when prompt_ids is not held
    n_first_response: int = -1  # length of the first assistant span when response_ids is not
    # reply_features(prompt, first response): uint16 shares, REPLY_FEATURES in order
    reply: np.ndarray | None = None
    # over the prompt's rows whose replies the pass measured (a prompt of the reference sample
    # answered several times: each row its own reply), int64: the sums of first-reply length x
    # reply, REPLY_FEATURES in order, then of the first-reply lengths, then the rows; None:
    # none measured (or only ``reply``'s row, read back at selection)
    reply_sum: np.ndarray | None = None

    @property
    def n_prompt_tokens(self) -> int:
        if self.n_prompt >= 0:
            return self.n_prompt
        assert self.prompt_ids is not None
        return int(self.prompt_ids.shape[0])

    @property
    def first_response_length(self) -> int:
        """Tokens in the first assistant span after the prompt (the recorded output length)."""
        if self.n_first_response >= 0:
            return self.n_first_response
        assert self.response_ids is not None
        return int(self.response_ids.shape[0])

    def reply_shares(self) -> np.ndarray:
        """:data:`REPLY_FEATURES` of the first reply as float shares (zeros when unknown)."""
        if self.reply is None:
            return np.zeros(len(REPLY_FEATURES))
        return self.reply.astype(np.float64) / REPLY_SCALE

    @property
    def feature_ids(self) -> np.ndarray:
        """The tokens selection features are computed from (:func:`feature_window`)."""
        w = self.window
        if w is None:
            assert self.prompt_ids is not None
            return feature_window(self.prompt_ids)
        return w if isinstance(w, np.ndarray) else w.read()

    @property
    def n_feature_ids(self) -> int:
        """``len(feature_ids)``, without reading a window kept in the window store."""
        w = self.window
        if w is None:
            return min(self.n_prompt_tokens, FEATURE_HEAD + FEATURE_TAIL)
        return len(w)

    @property
    def loaded(self) -> bool:
        """Whether the prompt, its mask and the first response are held."""
        return (
            self.prompt_ids is not None
            and self.prompt_mask is not None
            and self.response_ids is not None
        )


@dataclass(frozen=True, slots=True)
class Ambiguity:
    """Two readings of a prompt re-render to the same ids; which one an item keeps, and why.

    Attributes:
        kind: ``system_in_user``: the template writes the system prompt into a user turn, so
            that turn's text can be read as a system prompt and a user message, or as one user
            message.
        message: Index (in the item's messages) of the user message the text is in, or the
            user message after the system prompt read out of it.
        separator: What the template writes between a system prompt and that user text.
        reading: ``user`` (kept as user text: no evidence for a system prompt) or ``system``
            (read as a system prompt: evidence).
        evidence: Items of the source whose text opens with that system prompt (0 when kept
            as user text).
    """

    kind: str
    message: int
    separator: str
    reading: str
    evidence: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "separator": self.separator,
            "reading": self.reading,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ambiguity:
        return cls(
            kind=str(d["kind"]),
            message=int(d["message"]),
            separator=str(d["separator"]),
            reading=str(d["reading"]),
            evidence=int(d.get("evidence", 0)),
        )


@dataclass(frozen=True, slots=True)
class SuiteItem:
    """One benchmark prompt of a suite; one line of ``suite.jsonl``.

    Attributes:
        id: Stable id derived from the source and the prompt ids.
        source: Source name of the training rows.
        prompt: Decoded prompt span, special tokens kept.
        n_prompt_tokens: Prompt length in tokens, as recorded.
        n_response_tokens: Response length in tokens, as recorded (``seq_len - n_prompt``).
        max_tokens: Output length to ask for: the first assistant span after the prompt,
            capped by ``max_output_tokens`` when set.
        cluster: Index of the item's cluster within its source.
        cluster_size: Number of the source's candidates nearest to this item (in its stratum).
        weight: Corpus rows the item stands for (a source's weights sum to its rows; calibrated:
            see :mod:`distprompt.choose.design`).
        stratum: ``take-all`` (a row whose first reply alone holds a pick's share of the
            source's reply tokens: it stands for itself) or ``len<i>`` (first-reply length
            stratum ``i``, 1 = shortest); None in suites made before strata.
        provenance: Where the row lives in the corpus.
        prompt_ids: The exact prompt token ids.
        response_ids: The recorded first response's token ids (what model-free drafters are
            simulated on, :mod:`distprompt.evaluate`); None in suites written before they were
            kept.
        response: Decoded recorded first response (special tokens skipped).
        duplicates: How many rows of the corpus carry exactly this prompt.
        messages: Recovered chat turns (OpenAI style), when turn recovery ran.
        tools: Tool definitions the prompt carries, if any.
        fidelity: ``tokens`` | ``text`` | ``lossy`` (see :mod:`distprompt.recover.turns`).
        fidelity_reason: Why fidelity is not ``tokens``.
        structure: ``turns`` (every turn recognised: no template marker inside a message) or
            ``flat`` (the declared fallback: the prompt text in fewer messages, markers
            included); None when turn recovery did not run.
        chat_template_kwargs: Template switches the prompt was rendered with (e.g.
            ``{"enable_thinking": false}``), for clients that pass them to the server.
        ambiguities: Where the prompt has two readings that re-render alike, which one the
            messages hold and why (:class:`Ambiguity`).
    """

    id: str
    source: str
    prompt: str
    n_prompt_tokens: int
    n_response_tokens: int
    max_tokens: int
    cluster: int
    cluster_size: int
    weight: float
    provenance: Provenance
    prompt_ids: tuple[int, ...] = field(repr=False)
    stratum: str | None = None
    response: str = field(default="", repr=False)
    response_ids: tuple[int, ...] | None = field(default=None, repr=False)
    duplicates: int = 1
    messages: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    tools: tuple[dict[str, Any], ...] | None = field(default=None, repr=False)
    fidelity: str | None = None
    fidelity_reason: str | None = None
    chat_template_kwargs: dict[str, Any] | None = field(default=None, repr=False)
    structure: str | None = None
    ambiguities: tuple[Ambiguity, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``suite.jsonl`` object (key order fixed, so output is byte-stable)."""
        d: dict[str, Any] = {
            "id": self.id,
            "source": self.source,
            "prompt": self.prompt,
            "n_prompt_tokens": self.n_prompt_tokens,
            "n_response_tokens": self.n_response_tokens,
            "max_tokens": self.max_tokens,
            "cluster": self.cluster,
            "cluster_size": self.cluster_size,
            "weight": self.weight,
            "stratum": self.stratum,
            "duplicates": self.duplicates,
            "provenance": self.provenance.to_dict(),
            "fidelity": self.fidelity,
            "fidelity_reason": self.fidelity_reason,
            "structure": self.structure,
            "ambiguities": [a.to_dict() for a in self.ambiguities],
            "messages": list(self.messages) if self.messages is not None else None,
            "tools": list(self.tools) if self.tools is not None else None,
            "chat_template_kwargs": self.chat_template_kwargs,
            "response": self.response,
            "prompt_ids": list(self.prompt_ids),
            "response_ids": list(self.response_ids) if self.response_ids is not None else None,
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SuiteItem:
        messages = d.get("messages")
        tools = d.get("tools")
        response_ids = d.get("response_ids")
        return cls(
            id=str(d["id"]),
            source=str(d["source"]),
            prompt=str(d["prompt"]),
            n_prompt_tokens=int(d["n_prompt_tokens"]),
            n_response_tokens=int(d["n_response_tokens"]),
            max_tokens=int(d["max_tokens"]),
            cluster=int(d["cluster"]),
            cluster_size=int(d["cluster_size"]),
            weight=float(d["weight"]),
            stratum=d.get("stratum"),
            provenance=Provenance.from_dict(d["provenance"]),
            prompt_ids=tuple(int(i) for i in d["prompt_ids"]),
            response=str(d.get("response", "")),
            response_ids=tuple(int(i) for i in response_ids) if response_ids is not None else None,
            duplicates=int(d.get("duplicates", 1)),
            messages=tuple(messages) if messages is not None else None,
            tools=tuple(tools) if tools is not None else None,
            fidelity=d.get("fidelity"),
            fidelity_reason=d.get("fidelity_reason"),
            chat_template_kwargs=d.get("chat_template_kwargs"),
            structure=d.get("structure"),
            ambiguities=tuple(Ambiguity.from_dict(a) for a in d.get("ambiguities") or ()),
        )


@dataclass(slots=True)
class SourceStats:
    """Per-source counters and length histograms (exact, mergeable).

    ``response_*`` count ``n_response_tokens`` (the whole rest of the row, every later turn
    included); ``first_reply_*`` count the first assistant span after the prompt, which is what a
    benchmark client asks for (``max_tokens``) and what a server would generate.
    """

    rows: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    prompt_lengths: Counter[int] = field(default_factory=Counter)
    response_lengths: Counter[int] = field(default_factory=Counter)
    seq_lengths: Counter[int] = field(default_factory=Counter)
    trained_turns: Counter[int] = field(default_factory=Counter)
    flags: Counter[str] = field(default_factory=Counter)  # valid rows flagged, by reason
    # the first assistant span after the prompt: what a client asks for (max_tokens)
    first_reply_tokens: int = 0
    first_reply_lengths: Counter[int] = field(default_factory=Counter)

    def merge(self, other: SourceStats) -> SourceStats:
        self.rows += other.rows
        self.prompt_tokens += other.prompt_tokens
        self.response_tokens += other.response_tokens
        self.prompt_lengths.update(other.prompt_lengths)
        self.response_lengths.update(other.response_lengths)
        self.seq_lengths.update(other.seq_lengths)
        self.trained_turns.update(other.trained_turns)
        self.flags.update(other.flags)
        self.first_reply_tokens += other.first_reply_tokens
        self.first_reply_lengths.update(other.first_reply_lengths)
        return self


def max_tokens_for(first_reply: int, cap: int | None = None) -> int:
    """The output length a suite item asks for (``max_tokens``) given the length of its row's
    first reply: at least 1, at most ``cap`` (``max_output_tokens``).

    Example:
        >>> max_tokens_for(0), max_tokens_for(700), max_tokens_for(700, 512)
        (1, 700, 512)
    """
    n = max(1, int(first_reply))
    return n if cap is None else min(n, int(cap))


def max_tokens_histogram(first_reply: Mapping[int, int], cap: int | None = None) -> Counter[int]:
    """A first-reply histogram (:attr:`SourceStats.first_reply_lengths`) as the corpus's
    ``max_tokens`` histogram: each length through :func:`max_tokens_for`, so a capped suite is
    compared with the capped corpus.

    Example:
        >>> sorted(max_tokens_histogram({0: 2, 300: 1, 900: 4}, 512).items())
        [(1, 2), (300, 1), (512, 4)]
    """
    out: Counter[int] = Counter()
    for n, count in first_reply.items():
        out[max_tokens_for(n, cap)] += count
    return out


def histogram_quantiles(counts: Mapping[int, int], ps: Sequence[float]) -> list[int]:
    """Exact quantiles of a length histogram: for each ``p``, the smallest value ``v`` with at
    least ``p`` of the mass at or below ``v`` (``p = 0`` gives the minimum). Empty: ``[]``.

    Example:
        >>> histogram_quantiles({n: 1 for n in range(1, 101)}, [0, 0.5, 0.9, 1])
        [1, 50, 90, 100]
    """
    items = sorted((int(k), int(v)) for k, v in counts.items() if v > 0)
    if not items:
        return []
    vals = np.array([k for k, _ in items], dtype=np.int64)
    cum = np.cumsum([v for _, v in items])
    n = int(cum[-1])
    # round() first: 0.9 * 100 is 90.00000000000001 in floats, whose ceil would skip a rank.
    ranks = [max(1, int(np.ceil(round(p * n, 9)))) for p in ps]
    return [int(vals[i]) for i in np.searchsorted(cum, ranks)]
