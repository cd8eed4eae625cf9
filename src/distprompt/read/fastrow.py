"""The pass's row reader: every row validated as :func:`~distprompt.read.validate.parse_row` does,
but only what the pass needs is parsed.

A training row is mostly its response: ``input_ids`` and ``loss_mask`` of tens of thousands of
tokens, of which the pass needs the prompt prefix and a few counts. :func:`read_row` checks the
two arrays as bytes, without building a number or a list for them:

- each array body holds only digits and commas, or digits and ``", "`` separators (the two forms
  JSON writers of integer lists produce: orjson's compact one and Python's ``json.dumps``), no
  empty element, no leading zero, and as many elements as ``seq_len``; every ``loss_mask``
  element is ``0`` or ``1``; in a body written with ``", "`` every space follows a comma and
  every comma is followed by one (the other checks then read the spaces as separators);
- the ids stay below the limit (the tokenizer's vocabulary, else ``2**63``): numbers of fewer
  digits than the limit are below it, longer ones are not, and only numbers of the limit's
  length are compared;
- the rest of the line (the *skeleton*: the line with both array bodies cut out) is parsed with
  orjson and checked field by field, duplicate keys included.

Cutting out a body of digits and commas changes no string and no nesting of the line, so the
skeleton is valid JSON exactly when the line is, with the same keys; the key ``"input_ids"``
is written once, unescaped (a ``\\u`` escape sends the line to the full parser), so the body cut
out is the value of the top-level key. A line that passes all of this is a valid row with the
values read here; every other line goes to :func:`~distprompt.read.validate.parse_row`, which raises
the exact :class:`~distprompt.errors.DataError` (reason, ``shard:line``) or returns the row — so
the two readers agree on every line by construction, and ``tests/test_fastrow.py`` checks it.

Only the prompt ids are parsed (``numpy.fromstring`` on the prefix), and the prompt part of the
mask, the first trained span and its ids are read on demand, for the rows a pool keeps.
"""

from __future__ import annotations

import re
from array import array
from typing import TypeVar

import numpy as np
import orjson

from distprompt.read.validate import _duplicated_key, _unexplained, parse_row
from distprompt.records import Provenance, Row

__all__ = ["SHORT_LINE", "FullView", "LineView", "ListView", "RowView", "read_row", "row_view"]

_IDS = b'"input_ids"'
_MASK = b'"loss_mask"'
_OPEN = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*\[")
_KEYS = ("input_ids", "loss_mask", "seq_len", "n_prompt_tokens", "n_response_tokens", "source")
_BIG = 2**63
#: Without a vocabulary, ids of up to this many digits are below 2**63 without comparing.
_SAFE_DIGITS = 18


class RowView:
    """A valid row as the pass sees it.

    Attributes:
        source, seq_len, n_prompt_tokens, n_response_tokens, provenance: As in
            :class:`~distprompt.records.Row`.
        prompt_ids: ``input_ids[:n_prompt_tokens]`` (int64).
        trained_turns: Runs of 1s in ``loss_mask``.
    """

    __slots__ = (
        "n_prompt_tokens",
        "n_response_tokens",
        "prompt_ids",
        "provenance",
        "seq_len",
        "source",
        "trained_turns",
    )
    source: str
    seq_len: int
    n_prompt_tokens: int
    n_response_tokens: int
    provenance: Provenance
    prompt_ids: np.ndarray
    trained_turns: int

    def top_id(self, limit: int) -> int | None:
        """The largest id when it is ``>= limit``, else None."""
        raise NotImplementedError

    def prompt_mask(self) -> np.ndarray:
        """``loss_mask[:n_prompt_tokens]`` (int8)."""
        raise NotImplementedError

    def first_response_span(self) -> tuple[int, int]:
        """``(start, end)`` of the first trained span after the prompt (the whole response
        part when nothing after the prompt is trained)."""
        raise NotImplementedError

    def ids(self, start: int, end: int) -> np.ndarray:
        """``input_ids[start:end]`` (int64)."""
        raise NotImplementedError


class FullView(RowView):
    """A :class:`RowView` over a fully parsed :class:`~distprompt.records.Row`."""

    __slots__ = ("row",)

    def __init__(self, row: Row) -> None:
        self.row = row
        self.source = row.source
        self.seq_len = row.seq_len
        self.n_prompt_tokens = row.n_prompt_tokens
        self.n_response_tokens = row.n_response_tokens
        self.provenance = row.provenance
        self.prompt_ids = row.prompt_ids
        self.trained_turns = int(np.count_nonzero(np.diff(row.loss_mask, prepend=0) == 1))

    def top_id(self, limit: int) -> int | None:
        ids = self.row.input_ids
        if ids.size == 0:
            return None
        top = int(ids.max())
        return top if top >= limit else None

    def prompt_mask(self) -> np.ndarray:
        return self.row.loss_mask[: self.n_prompt_tokens].copy()

    def first_response_span(self) -> tuple[int, int]:
        row = self.row
        tail = row.loss_mask[row.n_prompt_tokens :]
        ones = np.flatnonzero(tail)
        if ones.size == 0:
            return row.n_prompt_tokens, row.seq_len
        start = int(ones[0])
        zeros = np.flatnonzero(tail[start:] == 0)
        end = start + (int(zeros[0]) if zeros.size else tail.shape[0] - start)
        return row.n_prompt_tokens + start, row.n_prompt_tokens + end

    def ids(self, start: int, end: int) -> np.ndarray:
        return self.row.input_ids[start:end]


class LineView(RowView):
    """A :class:`RowView` over the raw line, checked by :func:`read_row`."""

    __slots__ = ("_digits", "_i0", "_i1", "_j0", "_j1", "_limit", "_raw", "_sep", "_stride")
    _raw: bytes
    _i0: int  # input_ids body: raw[_i0:_i1]
    _i1: int
    _sep: int  # bytes per input_ids separator (1 for ",", 2 for ", ")
    _j0: int  # loss_mask body: raw[_j0:_j1]
    _j1: int
    _stride: int  # bytes per loss_mask element (2 for "0,", 3 for "0, ")
    _digits: int  # no id has more digits
    _limit: int  # every id is below it

    def top_id(self, limit: int) -> int | None:
        if limit >= self._limit:
            return None  # checked against a limit at least as strict
        return FullView(self._full()).top_id(limit)

    def _full(self) -> Row:
        p = self.provenance
        return parse_row(self._raw, shard=p.shard, line=p.line, offset=p.offset)

    def prompt_mask(self) -> np.ndarray:
        s = self._stride
        count = self.n_prompt_tokens * s - (s - 1)
        m = np.frombuffer(self._raw, np.uint8, count=count, offset=self._j0)
        return (m[:: self._stride] - 48).astype(np.int8)

    def first_response_span(self) -> tuple[int, int]:
        raw, j0, s, n = self._raw, self._j0, self._stride, self.n_prompt_tokens
        end_of_mask = self._j1
        p = raw.find(b"1", j0 + n * s, end_of_mask)
        if p < 0:
            return n, self.seq_len
        q = raw.find(b"0", p, end_of_mask)
        return (p - j0) // s, (self.seq_len if q < 0 else (q - j0) // s)

    def ids(self, start: int, end: int) -> np.ndarray:
        if end <= start:
            return np.zeros(0, dtype=np.int64)
        a = np.frombuffer(self._raw, np.uint8, count=self._i1 - self._i0, offset=self._i0)
        bound = min(a.shape[0], end * (self._digits + self._sep))
        commas = np.flatnonzero(a[:bound] == 44)
        lo = 0 if start == 0 else int(commas[start - 1]) + self._sep
        hi = a.shape[0] if end >= self.seq_len else int(commas[end - 1])
        return _parse_ints(self._raw[self._i0 + lo : self._i0 + hi])


def _parse_ints(text: bytes) -> np.ndarray:
    """Comma-separated integers (already checked to be digits and commas) as int64."""
    if not text:
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")


class ListView(RowView):
    """A :class:`RowView` of a short line, parsed whole by orjson (cheaper there than the byte
    checks, whose fixed cost is a few dozen numpy calls)."""

    __slots__ = ("_ids", "_mask")
    _ids: np.ndarray  # int64
    _mask: bytes  # one byte (0 or 1) per token

    def top_id(self, limit: int) -> int | None:
        top = int(self._ids.max())
        return top if top >= limit else None

    def prompt_mask(self) -> np.ndarray:
        return np.frombuffer(self._mask, np.int8, count=self.n_prompt_tokens).copy()

    def first_response_span(self) -> tuple[int, int]:
        n = self.n_prompt_tokens
        p = self._mask.find(b"\x01", n)
        if p < 0:
            return n, self.seq_len
        q = self._mask.find(b"\x00", p)
        return p, (self.seq_len if q < 0 else q)

    def ids(self, start: int, end: int) -> np.ndarray:
        return self._ids[start:end]


_V = TypeVar("_V", bound=RowView)


def _view(
    cls: type[_V],
    source: str,
    seq_len: int,
    n_prompt: int,
    n_resp: int,
    provenance: Provenance,
    prompt_ids: np.ndarray,
    trained_turns: int,
) -> _V:
    """A view with the fields every :class:`RowView` has (no ``__init__``: the hot path)."""
    v = cls.__new__(cls)
    v.source = source
    v.seq_len = seq_len
    v.n_prompt_tokens = n_prompt
    v.n_response_tokens = n_resp
    v.provenance = provenance
    v.prompt_ids = prompt_ids
    v.trained_turns = trained_turns
    return v


#: Lines up to this size are parsed whole (:class:`ListView`), longer ones checked as bytes.
SHORT_LINE = 8 << 10


def _short(raw: bytes, shard: str, line: int, offset: int) -> ListView | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict:
        return None
    try:
        ids = obj["input_ids"]
        mask = obj["loss_mask"]
        source = obj["source"]
        seq_len, n_prompt = obj["seq_len"], obj["n_prompt_tokens"]
        n_resp = obj["n_response_tokens"]
    except KeyError:
        return None
    if (
        type(ids) is not list
        or type(mask) is not list
        or type(source) is not str
        or not source.strip()
        or type(seq_len) is not int
        or type(n_prompt) is not int
        or type(n_resp) is not int
        or not 0 < n_prompt <= seq_len
        or n_resp < 0
        or len(ids) != seq_len
        or len(mask) != seq_len
    ):
        return None
    # no duplicated key and no boolean among the ids (see validate._unexplained)
    if _unexplained(raw, obj):
        return None
    try:
        arr = np.frombuffer(array("q", ids), dtype=np.int64)  # ints below 2**63 only
        m = bytes(mask)  # ints in 0..255 only
    except (TypeError, OverflowError, ValueError):
        return None
    if m.translate(None, b"\x00\x01") or int(arr.min()) < 0:
        return None
    where = Provenance(shard=shard, line=line, offset=offset)
    turns = m.count(b"\x00\x01") + (m[0] == 1)
    v = _view(ListView, source, seq_len, n_prompt, n_resp, where, arr[:n_prompt], turns)
    v._ids = arr
    v._mask = m
    return v


def row_view(row: Row) -> RowView:
    """A :class:`RowView` of a parsed row."""
    return FullView(row)


def read_row(
    raw: bytes | None, *, shard: str, line: int, offset: int, id_limit: int | None = None
) -> RowView:
    """Validate one JSONL line and return what the pass needs.

    Accepts and rejects exactly the lines :func:`~distprompt.read.validate.parse_row` does, with
    the same reason (lines the byte checks cannot vouch for are handed to it).

    Args:
        id_limit: Ids at or above it need :meth:`RowView.top_id` (the vocabulary size); the
            check is free for this limit.

    Raises:
        DataError: The line is not a valid row.
    """
    if raw is not None:
        view: RowView | None
        if len(raw) <= SHORT_LINE:
            view = _short(raw, shard, line, offset)
        else:
            view = _fast(raw, shard, line, offset, id_limit)
        if view is not None:
            return view
    return FullView(parse_row(raw, shard=shard, line=line, offset=offset))


def _body(raw: bytes, key: bytes) -> tuple[int, int, int] | None:
    """``(key position, body start, body end)`` of the array after ``key``, written once."""
    k = raw.find(key)
    if k < 0:
        return None
    m = _OPEN.match(raw, k + len(key))
    if m is None:
        return None
    start = m.end()
    end = raw.find(b"]", start)
    if end <= start:
        return None
    return k, start, end


def _runs(dig: np.ndarray, r: int) -> np.ndarray:
    """``w[p]`` is True where ``dig[p : p + r]`` is all True (runs of at least ``r`` digits)."""
    w, have = dig, 1
    while have < r:
        step = min(have, r - have)
        w = w[:-step] & w[step:]
        have += step
    return w


def _fast(raw: bytes, shard: str, line: int, offset: int, id_limit: int | None) -> LineView | None:
    ids = _body(raw, _IDS)
    if ids is None:
        return None
    mask = _body(raw, _MASK)
    if mask is None:
        return None
    ik, i0, i1 = ids
    mk, j0, j1 = mask
    # Bodies hold no quote, so a key cannot lie inside the other body once the bodies check out;
    # the skeleton cuts both bodies out, in line order.
    if i0 < j0:
        if mk < i1:
            return None
        skel = raw[:i0] + raw[i1:j0] + raw[j1:]
    else:
        if ik < j1:
            return None
        skel = raw[:j0] + raw[j1:i0] + raw[i1:]
    try:
        obj = orjson.loads(skel)
    except orjson.JSONDecodeError:
        return None
    if type(obj) is not dict or any(k not in obj for k in _KEYS):
        return None
    if skel.count(_IDS) != 1 or skel.count(_MASK) != 1:
        return None  # a key written twice (the bodies hold no quote: they cannot hide one)
    if obj["input_ids"] != [] or obj["loss_mask"] != []:
        return None
    if _unexplained(skel, obj) and _duplicated_key(skel) is not None:
        return None
    source = obj["source"]
    seq_len, n_prompt, n_resp = obj["seq_len"], obj["n_prompt_tokens"], obj["n_response_tokens"]
    if (
        type(source) is not str
        or not source.strip()
        or type(seq_len) is not int
        or type(n_prompt) is not int
        or type(n_resp) is not int
        or not 0 < n_prompt <= seq_len
        or n_resp < 0
    ):
        return None
    # input_ids: digits and commas only (or digits and ", ", as json.dumps writes), seq_len
    # elements, no empty one, no leading zero
    n = i1 - i0
    a = np.frombuffer(raw, np.uint8, count=n, offset=i0)
    sep = 1  # bytes per separator
    if raw.find(b" ", i0, i1) >= 0:
        sp = a == 32
        if sp[0] or not np.array_equal(a[:-1] == 44, sp[1:]):
            return None  # a space not after a comma, or a comma without its space
        if a.max() > 57 or np.any((a < 44) != sp):
            return None  # a byte other than a digit, a comma or the space after one
        sep = 2
    elif a.max() > 57 or a.min() < 44:
        return None
    if raw.find(b"-", i0, i1) >= 0 or raw.find(b".", i0, i1) >= 0 or raw.find(b"/", i0, i1) >= 0:
        return None
    dig = a >= 48
    n_commas = (n - int(np.count_nonzero(dig))) // sep
    if n_commas + 1 != seq_len or not dig[0] or not dig[-1]:
        return None
    if sep == 1 and n_commas and not np.all(dig[1:] | dig[:-1]):
        return None  # an empty element
    if sep == 2 and np.any(sp[:-1] & (a[1:] == 44)):
        return None  # an empty element (", , ": every comma has its space)
    if n > 1:
        zero = a[:-1] == 48
        zero &= dig[1:]  # a 0 followed by a digit ...
        if zero[0] or np.any(zero[1:] & ~dig[:-2]):  # ... at the start of a number
            return None
    # range: numbers shorter than the limit's digits are below it, longer ones are not
    limit = _BIG if id_limit is None else min(int(id_limit), _BIG)
    if limit > 10**_SAFE_DIGITS:
        digits = _SAFE_DIGITS
        if np.any(_runs(dig, digits + 1)):
            return None
    else:
        digits = len(str(limit))
        w = _runs(dig, digits)
        if w.size and np.any(w):
            if np.any(w[:-1] & w[1:]):
                return None  # a number longer than the limit
            # numbers of exactly the limit's length: compare digit by digit, keeping only those
            # equal to the limit so far
            at = np.flatnonzero(w)
            for d, c in enumerate(str(limit).encode()):
                col = a[at + d]
                if np.any(col > c):
                    return None
                at = at[col == c]
                if not at.size:
                    break
            else:
                return None  # equal to the limit
    # loss_mask: seq_len elements, each 0 or 1, separated by "," or ", "
    m = j1 - j0
    stride = 2 if m < 3 or raw[j0 + 2] != 32 else 3
    if m != seq_len * stride - (stride - 1):
        return None
    last = raw[j1 - 1] - 48
    if not 0 <= last <= 1:
        return None
    if seq_len == 1:
        turns = last
    elif stride == 2:
        # "0," and "1," as little-endian uint16: 44 * 256 + 48 and + 49
        pairs = np.frombuffer(raw, "<u2", count=seq_len - 1, offset=j0) - np.uint16(11312)
        if pairs.max() > 1:
            return None
        turns = (
            int(pairs[0]) + int(np.count_nonzero(pairs[1:] > pairs[:-1])) + int(last > pairs[-1])
        )
    else:
        b = np.frombuffer(raw, np.uint8, count=m, offset=j0)
        ev = b[::3]
        if ev.min() < 48 or ev.max() > 49:
            return None
        if not np.all(b[1::3] == 44) or not np.all(b[2::3] == 32):
            return None
        turns = int(ev[0] == 49) + int(np.count_nonzero(ev[1:] > ev[:-1]))
    # the prompt ids
    if n_prompt == seq_len:
        end = n
    else:
        bound = min(n, n_prompt * (digits + sep))
        commas = np.flatnonzero(a[:bound] == 44)
        end = int(commas[n_prompt - 1])
    prompt = _parse_ints(raw[i0 : i0 + end])  # numpy skips the space after each comma
    if prompt.shape[0] != n_prompt:
        return None
    where = Provenance(shard=shard, line=line, offset=offset)
    v = _view(LineView, source, seq_len, n_prompt, n_resp, where, prompt, turns)
    v._raw = raw
    v._sep = sep
    v._i0, v._i1, v._j0, v._j1 = i0, i1, j0, j1
    v._stride = stride
    v._digits = digits
    v._limit = limit
    return v
