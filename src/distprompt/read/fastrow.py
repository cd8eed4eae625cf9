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
  orjson and checked field by field, duplicate keys included, and
  ``n_prompt_tokens + n_response_tokens == seq_len`` (so ``n_response_tokens >= 0``).

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
import struct
import threading
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
        top = int(_MAX(self._ids))
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
        or n_resp != seq_len - n_prompt
        or len(ids) != seq_len
        or len(mask) != seq_len
    ):
        return None
    # no duplicated key and no boolean among the ids (see validate._unexplained)
    if _unexplained(raw, obj):
        return None
    try:
        # ints (bools too: see above) of -2**63..2**63-1 only; struct packs faster than array
        arr = np.frombuffer(struct.pack(f"<{seq_len}q", *ids), dtype=np.int64)
        m = bytes(mask)  # ints in 0..255 only
    except (struct.error, TypeError, OverflowError, ValueError):
        return None
    # a negative id is written with a "-" (rare elsewhere in a short line: memchr, no numpy)
    if m.translate(None, b"\x00\x01") or (b"-" in raw and int(_MIN(arr)) < 0):
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


def _body(raw: bytes, key: bytes, near: int = 0) -> tuple[int, int, int] | None:
    """``(key position, body start, body end)`` of the array after ``key``, looked for from
    ``near`` first, then from the start (the caller checks that the key is written once)."""
    k = raw.find(key, near)
    if k < 0 and near:
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


class _Scratch(threading.local):
    """Per-thread buffers the byte checks write their temporaries into.

    A fresh temporary of a long row's size is a fresh ``mmap`` for the allocator (over its
    threshold of 128 KB): dozens of page faults per temporary, which cost more than the checks
    themselves. Bodies longer than :data:`SCRATCH_MAX` get fresh temporaries (kept buffers stay
    bounded).
    """

    def __init__(self) -> None:
        self.size = 0
        self.bufs: tuple[np.ndarray, ...] = ()

    def get(self, n: int) -> tuple[np.ndarray, ...]:
        """Four boolean buffers of at least ``n`` elements."""
        if n > SCRATCH_MAX:
            return tuple(np.empty(n, dtype=bool) for _ in range(4))
        if n > self.size:
            self.size = max(n, 2 * self.size, 1 << 16)
            self.bufs = tuple(np.empty(self.size, dtype=bool) for _ in range(4))
        return self.bufs


#: Bodies longer than this (bytes) get fresh temporaries instead of the kept buffers.
SCRATCH_MAX = 4 << 20
_scratch = _Scratch()


def _runs(dig: np.ndarray, r: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``w[p]`` is True where ``dig[p : p + r]`` is all True (runs of at least ``r`` digits);
    ``x`` and ``y`` are buffers as long as ``dig`` (``w`` is a view of one of them)."""
    w, have = dig, 1
    while have < r:
        step = min(have, r - have)
        k = w.shape[0] - step
        if k <= 0:
            return x[:0]
        out = x if w.base is not x else y
        w = np.logical_and(w[:-step], w[step:], out=out[:k])
        have += step
    return w


def _check_ids(raw: bytes, i0: int, i1: int, seq_len: int, limit: int) -> tuple[int, int] | None:
    """``(bytes per separator, most digits an id may have)`` when ``raw[i0:i1]`` is a valid
    ``input_ids`` body of ``seq_len`` ids below ``limit``; None when it is not (or might not be).

    Digits and commas only, or digits and ``", "`` (every comma followed by one space, every
    space after a comma); no empty element, no leading zero, no sign, point or exponent.

    A dozen passes over the body, each a numpy call: the non-digits (``nd``) and their count,
    the commas and their count; with ``", "``, whether the byte after each comma is a space
    followed by a digit (which also rules out an empty element); then the leading zeros and
    the range.
    """
    n = i1 - i0
    if not (47 < raw[i0] < 58 and 47 < raw[i1 - 1] < 58):
        return None  # the first or last element empty (or not a number)
    a = np.frombuffer(raw, np.uint8, count=n, offset=i0)
    if _MAX(a) > 57:
        return None  # a byte above "9"
    if raw.find(b"-", i0, i1) >= 0 or raw.find(b".", i0, i1) >= 0 or raw.find(b"/", i0, i1) >= 0:
        return None  # 45-47: the bytes between "," and "0"
    # every byte is now a digit or one of 0-44 (a non-digit)
    nd_b, com_b, x, y = _scratch.get(n)
    nd = np.less(a, 48, out=nd_b[:n])
    n_nd = int(np.count_nonzero(nd))
    if raw.find(b" ", i0, i1) < 0:
        sep = 1
        # every non-digit a comma (the smallest byte is ","), as many as separators, and no
        # two in a row (an empty element)
        if n_nd != seq_len - 1 or _MIN(a) < 44:
            return None
        if n_nd and _ANY(np.logical_and(nd[:-1], nd[1:], out=x[: n - 1])):
            return None
    else:
        sep = 2
        if n_nd != 2 * (seq_len - 1) or raw[i1 - 2] == 44:
            return None
        com = np.equal(a, 44, out=com_b[:n])
        if int(np.count_nonzero(com)) != seq_len - 1:
            return None
        # a comma at p exactly where a space at p+1 is followed by a digit at p+2 (p < n-2;
        # the last two bytes hold no comma): every comma is followed by " " and a digit, and
        # as many spaces as commas are counted among the non-digits, so nothing else is one
        k = n - 2
        if k > 0:
            f = np.equal(a[1 : n - 1], 32, out=y[:k])
            np.greater(f, nd[2:], out=f)  # the space followed by a digit
            if _ANY(np.not_equal(com[:k], f, out=x[:k])):
                return None
    # a leading zero: a 0 at the start of a number (the first byte, or after a non-digit,
    # which is now a separator) followed by a digit
    if n > 1 and raw[i0] == 48 and not nd[1]:
        return None
    k = n - 2
    if k > 0:
        z = np.equal(a[1 : n - 1], 48, out=x[:k])
        z &= nd[:k]
        if _ANY(np.greater(z, nd[2:], out=z)):
            return None
    # range: numbers shorter than the limit's digits are below it, longer ones are not
    if limit >= 10**_SAFE_DIGITS:
        # A run of 19 or more digits covers an aligned block of 8 of nd[:n8] (n8: n rounded
        # down to 8): one ending by n8 does, and one ending after it covers the block that
        # ends at n8 (at most 7 of its digits lie after). Without such a block there is none.
        n8 = n - n % 8
        if n8 and _MIN(nd[:n8].view(np.uint64)) == 0:
            dig = np.logical_not(nd, out=com_b[:n])
            if _runs(dig, _SAFE_DIGITS + 1, x, y).any():
                return None
        return sep, _SAFE_DIGITS
    text = str(limit).encode()
    digits = len(text)
    dig = np.logical_not(nd, out=com_b[:n])
    at = np.flatnonzero(_runs(dig, digits, x, y))  # where `digits` digits in a row start
    if at.shape[0] == 0:
        return sep, digits
    if at.shape[0] > 1 and int(_MIN(at[1:] - at[:-1])) == 1:
        return None  # two such starts in a row: a number longer than the limit
    # numbers of exactly the limit's length (fewer than 19 digits): compared as strings of
    # `digits` bytes (as numbers of one length compare), read through a view in which
    # element p is the string starting at byte p of the body
    strings = np.ndarray((n - digits + 1,), dtype=f"S{digits}", buffer=raw, offset=i0, strides=(1,))
    if _ANY(strings[at] >= text):
        return None  # not below the limit
    return sep, digits


_MAX = np.maximum.reduce
_MIN = np.minimum.reduce
_ANY = np.logical_or.reduce


#: ``"0, "`` repeated: the stride-3 mask body with every element 0 (grown on demand).
_PATTERN3 = np.frombuffer(b"0, " * (1 << 16), np.uint8)


def _check_mask(raw: bytes, j0: int, j1: int, seq_len: int) -> tuple[int, int] | None:
    """``(bytes per element, number of runs of 1s)`` when ``raw[j0:j1]`` is a valid
    ``loss_mask`` body of ``seq_len`` elements (0 or 1, separated by ``","`` or ``", "``)."""
    global _PATTERN3
    m = j1 - j0
    stride = 2 if m < 3 or raw[j0 + 2] != 32 else 3
    if m != seq_len * stride - (stride - 1):
        return None
    last = raw[j1 - 1] - 48
    if not 0 <= last <= 1:
        return None
    if seq_len == 1:
        return stride, last
    b = np.frombuffer(raw, np.uint8, count=m, offset=j0)
    _, _, x, y = _scratch.get(m)
    if stride == 2:
        # "0," and "1," as little-endian uint16: 44 * 256 + 48 and + 49
        k = seq_len - 1
        pairs = np.subtract(
            b[: 2 * k].view("<u2"), np.uint16(11312), out=x[: 2 * k].view(np.uint16)
        )
        if pairs.max() > 1:
            return None
        up = np.greater(pairs[1:], pairs[:-1], out=y[: k - 1])
        return stride, int(pairs[0]) + int(np.count_nonzero(up)) + int(last > pairs[-1])
    # stride 3: the body XOR "0, 0, ...": 0 or 1 at the digits, 0 elsewhere — or 1 where a
    # "-" (for ",") or a "!" (for " ") stands, found apart
    if _PATTERN3.shape[0] < m:
        _PATTERN3 = np.frombuffer(b"0, " * (m // 3 + 1), np.uint8)
    v = np.bitwise_xor(b, _PATTERN3[:m], out=x[:m].view(np.uint8))
    if _MAX(v) > 1 or raw.find(b"-", j0, j1) >= 0 or raw.find(b"!", j0, j1) >= 0:
        return None
    vb = v.view(np.bool_)  # 0 and 1 only: read as booleans (numpy compares those faster)
    up = np.greater(vb[3:], vb[:-3], out=y[: m - 3])  # 0 then 1 at consecutive elements
    return stride, int(v[0]) + int(np.count_nonzero(up))


def _fast(raw: bytes, shard: str, line: int, offset: int, id_limit: int | None) -> LineView | None:
    ids = _body(raw, _IDS)
    if ids is None:
        return None
    mask = _body(raw, _MASK, ids[2])  # usually after the ids: no search through them
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
        or n_resp != seq_len - n_prompt
    ):
        return None
    # input_ids: digits and commas only (or digits and ", ", as json.dumps writes), seq_len
    # elements, no empty one, no leading zero, every id below the limit
    limit = _BIG if id_limit is None else min(int(id_limit), _BIG)
    checked = _check_ids(raw, i0, i1, seq_len, limit)
    if checked is None:
        return None
    sep, digits = checked
    # loss_mask: seq_len elements, each 0 or 1, separated by "," or ", "
    checked_mask = _check_mask(raw, j0, j1, seq_len)
    if checked_mask is None:
        return None
    stride, turns = checked_mask
    # the prompt ids: the first n_prompt elements lie within n_prompt * (digits + sep) bytes
    n = i1 - i0
    bound = n if n_prompt == seq_len else min(n, n_prompt * (digits + sep))
    # numpy skips the space after each comma; count stops at the prompt's end
    prompt = np.fromstring(raw[i0 : i0 + bound], dtype=np.int64, sep=",", count=n_prompt)
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
