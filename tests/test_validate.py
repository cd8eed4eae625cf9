"""Row validation (:func:`distprompt.read.validate.parse_row`) as a table: one line in, one verdict
out.

Every row-level case of the bad-input policy (``../shared/DESIGN.md``, "Bad input"): a line that
is not a valid row raises a :class:`DataError` with the reason skipped rows are counted under and
a ``shard:line: expected …, found …; what to do`` message; a valid line gives these values.
``tests/test_fastrow.py`` runs the same table through the pass's fast reader, and
``tests/test_hostile.py`` runs it once through the CLI with ``--on-error skip``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from distprompt.errors import DataError
from distprompt.read.validate import DEFAULT_MAX_LINE_BYTES, REQUIRED_KEYS, parse_row

from factories import dumps, make_row

BASE = make_row(999)
IDS, MASK, N = BASE["input_ids"], BASE["loss_mask"], BASE["seq_len"]
P = BASE["n_prompt_tokens"]


def with_changes(**changes: Any) -> bytes:
    return dumps({**BASE, **changes})


def without(key: str) -> bytes:
    return dumps({k: v for k, v in BASE.items() if k != key})


def _tiny(tail: bytes = b"") -> bytes:
    """A valid one-token row written by hand, with ``tail`` (``,"key":value`` pairs) appended."""
    return (
        b'{"input_ids":[1],"loss_mask":[0],"seq_len":1,"n_prompt_tokens":1,'
        b'"n_response_tokens":0,"source":"s"' + tail + b"}"
    )


# (case id, the line, reason counted when skipping, text the message must hold). Imported by
# test_fastrow (the fast reader agrees) and test_hostile (all of them through the CLI at once).
ROW_CASES: list[tuple[str, bytes, str, str]] = [
    # not JSON, not an object
    ("not_json", b"this is not json", "invalid_json", "invalid JSON"),
    ("truncated", dumps(make_row(3, "cut"))[:25], "invalid_json", "truncated or corrupt"),
    ("trailing_garbage", _tiny() + b" x", "invalid_json", "after document"),
    ("nul_bytes", b"\x00" * 100, "invalid_json", "invalid JSON"),
    ("invalid_utf8", b'{"source": "caf\xe9"}', "invalid_json", "invalid UTF-8"),
    ("lone_surrogate", b'{"source": "\xed\xa0\x80"}', "invalid_json", "invalid UTF-8"),
    ("double_bom", b"\xef\xbb\xbf\xef\xbb\xbf{}", "invalid_json", "invalid UTF-8"),
    ("too_deep", b"[" * 5000 + b"]" * 5000, "invalid_json", "depth limit"),
    ("number_overflows_float", b'{"input_ids": 1e400}', "invalid_json", "infinity"),
    ("json_array", b"[1, 2, 3]", "not_an_object", "found a JSON array"),
    ("json_number", b"42", "not_an_object", "found a JSON number"),
    ("json_string", b'"input_ids"', "not_an_object", "found a JSON string"),
    ("json_null", b"null", "not_an_object", "found a JSON null"),
    ("json_true", b"true", "not_an_object", "found a JSON boolean"),
    # keys
    ("empty_object", b"{}", "missing_input_ids", "found 'input_ids' missing"),
    ("deep_other_keys", b'{"a":' * 300 + b"1" + b"}" * 300, "missing_input_ids", "missing"),
    *[(f"missing_{k}", without(k), f"missing_{k}", f"found {k!r} missing") for k in REQUIRED_KEYS],
    (
        "duplicate_source",
        dumps(BASE)[:-1] + b',"source":"other"}',
        "duplicate_key",
        "found 'source' twice",
    ),
    (
        "duplicate_input_ids",
        b'{"input_ids":[1,2],' + dumps(BASE)[1:],
        "duplicate_key",
        "found 'input_ids' twice",
    ),
    ("duplicate_tiny", _tiny(b',"source":"t"'), "duplicate_key", "found 'source' twice"),
    # the same key spelled with an escape is still the same key
    ("duplicate_escaped", _tiny(b',"sourc\\u0065":"t"'), "duplicate_key", "found 'source' twice"),
    # input_ids
    ("ids_strings", with_changes(input_ids=[str(i) for i in IDS]), "bad_input_ids", "found str"),
    ("ids_floats", with_changes(input_ids=[float(i) for i in IDS]), "bad_input_ids", "float"),
    ("ids_booleans", with_changes(input_ids=[True] * N), "bad_input_ids", "found bool True"),
    ("ids_bool_among_ints", with_changes(input_ids=[*IDS[:-1], True]), "bad_input_ids", "bool"),
    (
        "ids_bool_in_tiny_row",  # numpy would read it as 1
        b'{"input_ids":[1,true],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
        b'"n_response_tokens":1,"source":"s"}',
        "bad_input_ids",
        "found bool True",
    ),
    # a float without exponent among extra keys: its re-serialization (1e-07) has an "e" the
    # line does not, which once hid the "e" of the boolean from the cheap check
    *[
        (
            f"{k}_{str(flag).lower()}_beside_plain_float",
            with_changes(**{k: [*v[:-1], flag]}, x=1e-7).replace(b"1e-07", b"0.0000001"),
            f"bad_{k}" if k == "input_ids" else "bad_loss_mask",
            "bool",
        )
        for k, v in (("input_ids", IDS), ("loss_mask", MASK))
        for flag in (True, False)
    ],
    (
        "ids_bool_beside_plain_float_tiny",
        b'{"input_ids":[1,true],"loss_mask":[0,1],"seq_len":2,"n_prompt_tokens":1,'
        b'"n_response_tokens":1,"source":"s","x":0.0000001}',
        "bad_input_ids",
        "found bool True",
    ),
    ("ids_nested", with_changes(input_ids=[[i] for i in IDS]), "bad_input_ids", "found list"),
    ("ids_ragged", with_changes(input_ids=[[1, 2], *IDS[1:]]), "bad_input_ids", "found list"),
    ("ids_null_inside", with_changes(input_ids=[*IDS[:-1], None]), "bad_input_ids", "NoneType"),
    ("ids_not_a_list", with_changes(input_ids="1 2 3"), "bad_input_ids", "found str"),
    ("ids_negative", with_changes(input_ids=[*IDS[:-1], -5]), "negative_id", "found -5"),
    ("ids_beyond_int64", with_changes(input_ids=[*IDS[:-1], 2**63]), "bad_input_ids", "range"),
    ("ids_beyond_uint64", with_changes(input_ids=[*IDS[:-1], 2**70]), "bad_input_ids", "float"),
    # seq_len
    ("seq_len_string", with_changes(seq_len=str(N)), "bad_seq_len", "found str"),
    ("seq_len_float", with_changes(seq_len=float(N)), "bad_seq_len", "found float"),
    ("seq_len_boolean", with_changes(seq_len=True), "bad_seq_len", "found bool"),
    ("seq_len_mismatch", with_changes(seq_len=N + 1), "seq_len_mismatch", f"seq_len={N + 1}"),
    ("seq_len_negative", with_changes(seq_len=-1), "seq_len_mismatch", "seq_len=-1"),
    # loss_mask
    ("mask_short", with_changes(loss_mask=MASK[:-1]), "loss_mask_length", f"found {N - 1}"),
    ("mask_long", with_changes(loss_mask=[*MASK, 1]), "loss_mask_length", f"found {N + 1}"),
    ("mask_two", with_changes(loss_mask=[*MASK[:-1], 2]), "bad_loss_mask", "found 2"),
    ("mask_negative", with_changes(loss_mask=[-1, *MASK[1:]]), "bad_loss_mask", "found -1"),
    ("mask_floats", with_changes(loss_mask=[0.5] * N), "bad_loss_mask", "float"),
    ("mask_boolean", with_changes(loss_mask=[*MASK[:-1], True]), "bad_loss_mask", "bool"),
    ("mask_not_a_list", with_changes(loss_mask=1), "bad_loss_mask", "found int"),
    # n_prompt_tokens, n_response_tokens
    ("n_prompt_zero", with_changes(n_prompt_tokens=0), "bad_n_prompt_tokens", "found 0"),
    ("n_prompt_negative", with_changes(n_prompt_tokens=-3), "bad_n_prompt_tokens", "found -3"),
    (
        "n_prompt_beyond_seq_len",
        with_changes(n_prompt_tokens=N + 1, n_response_tokens=0),
        "bad_n_prompt_tokens",
        f"found {N + 1}",
    ),
    ("n_prompt_string", with_changes(n_prompt_tokens="3"), "bad_n_prompt_tokens", "found str"),
    ("n_prompt_float", with_changes(n_prompt_tokens=3.0), "bad_n_prompt_tokens", "float"),
    ("n_response_negative", with_changes(n_response_tokens=-1), "bad_n_response_tokens", "-1"),
    ("n_response_null", with_changes(n_response_tokens=None), "bad_n_response_tokens", "None"),
    # n_prompt + n_response == seq_len: else where the prompt ends is in doubt
    *[
        (
            f"length_sum_{name}",
            with_changes(n_response_tokens=resp),
            "length_sum_mismatch",
            f"found {P} + {resp} = {P + resp}",
        )
        for name, resp in (("plus_one", N - P + 1), ("minus_one", N - P - 1), ("seq_len", N))
    ],
    (
        "length_sum_prompt_shifted",
        with_changes(n_prompt_tokens=P - 1),
        "length_sum_mismatch",
        f"found {P - 1} + {N - P}",
    ),
    (
        "length_sum_tiny",
        _tiny().replace(b'"n_response_tokens":0', b'"n_response_tokens":1'),
        "length_sum_mismatch",
        "== seq_len (1), found 1 + 1 = 2",
    ),
    # source
    ("source_empty", with_changes(source=""), "bad_source", "non-empty string"),
    ("source_blank", with_changes(source="   "), "bad_source", "non-empty string"),
    ("source_number", with_changes(source=7), "bad_source", "found 7"),
    ("source_null", with_changes(source=None), "bad_source", "found None"),
    ("source_list", with_changes(source=["chat"]), "bad_source", "found ['chat']"),
]

_ESCAPED = make_row(99)

# (case id, the line, the parsed (source, input_ids, loss_mask, n_prompt_tokens,
# n_response_tokens); seq_len is len(input_ids)). Extra keys are allowed and ignored, even ones
# that mention a schema key.
GOOD_ROWS: list[tuple[str, bytes, tuple[str, list[int], list[int], int, int]]] = [
    ("plain", dumps(BASE), ("chat", IDS, MASK, P, N - P)),
    (
        "spaced",
        dumps(BASE).replace(b",", b", ").replace(b":", b": "),
        ("chat", IDS, MASK, P, N - P),
    ),
    ("tiny", _tiny(), ("s", [1], [0], 1, 0)),
    # whether the ids fit the tokenizer is the pass's check (id_out_of_vocab), not the parser's
    (
        "ids_beyond_vocab",
        with_changes(input_ids=[*IDS[:-1], 10**7]),
        ("chat", [*IDS[:-1], 10**7], MASK, P, N - P),
    ),
    (
        "ids_up_to_int64",
        with_changes(input_ids=[*IDS[:-1], 2**63 - 1]),
        ("chat", [*IDS[:-1], 2**63 - 1], MASK, P, N - P),
    ),
    ("all_prompt", with_changes(n_prompt_tokens=N, n_response_tokens=0), ("chat", IDS, MASK, N, 0)),
    (
        "extra_nested_keys",
        with_changes(id="x-1", meta={"source": "nested", "input_ids": [1, 2]}),
        ("chat", IDS, MASK, P, N - P),
    ),
    (
        "extra_key_names_as_values",
        with_changes(note="input_ids", flag=True, other=False, nothing=None),
        ("chat", IDS, MASK, P, N - P),
    ),
    (
        "extra_quotes_and_backslashes",
        with_changes(text='she said "source" and \\ "input_ids"', score=1.5e3),
        ("chat", IDS, MASK, P, N - P),
    ),
    (
        "extra_unicode",
        with_changes(messages=[{"role": "user", "content": "\u00e9\n\t"}], n=-1),
        ("chat", IDS, MASK, P, N - P),
    ),
    ("extra_deep", with_changes(deep=[[[[{"e": "eee"}]]]]), ("chat", IDS, MASK, P, N - P)),
    # deeper than orjson writes (so the cheap re-serialization check cannot run)
    (
        "extra_deeper_than_orjson_writes",
        _tiny(b',"x":' + b"[" * 400 + b"]" * 400),
        ("s", [1], [0], 1, 0),
    ),
    (
        "escapes_and_spaces",  # \u escapes a JSON writer may choose, spaces around separators
        b'{ "source" : "ch\\u0061t", "input_ids" : '
        + dumps(_ESCAPED["input_ids"])
        + b', "loss_mask": '
        + dumps(_ESCAPED["loss_mask"])
        + b', "seq_len": %d, "n_prompt_tokens": %d, "n_response_tokens": %d, '
        % (_ESCAPED["seq_len"], _ESCAPED["n_prompt_tokens"], _ESCAPED["n_response_tokens"])
        + b'"x": "\\u0022q\\u0022"}',
        (
            "chat",
            _ESCAPED["input_ids"],
            _ESCAPED["loss_mask"],
            _ESCAPED["n_prompt_tokens"],
            _ESCAPED["n_response_tokens"],
        ),
    ),
]

#: Every line of both tables, for the readers that must agree with parse_row on each.
LINES: list[tuple[str, bytes]] = [(c[0], c[1]) for c in ROW_CASES] + [
    (c[0], c[1]) for c in GOOD_ROWS
]


@pytest.mark.parametrize(
    ("raw", "reason", "needle"), [c[1:] for c in ROW_CASES], ids=[c[0] for c in ROW_CASES]
)
def test_bad_line(raw: bytes, reason: str, needle: str) -> None:
    with pytest.raises(DataError) as ei:
        parse_row(raw, shard="sub/bad.jsonl", line=3, offset=120)
    err = ei.value
    assert (err.shard, err.line, err.reason) == ("sub/bad.jsonl", 3, reason)
    msg = str(err)
    assert msg.startswith("sub/bad.jsonl:3: expected "), msg
    assert needle in msg, (needle, msg)
    assert "found" in msg and ("--on-error skip" in msg or "fix" in msg), msg


def test_line_too_long() -> None:
    """The reader hands over None for a line longer than the limit (never read into memory)."""
    with pytest.raises(DataError) as ei:
        parse_row(None, shard="s.jsonl", line=9, offset=0)
    assert (ei.value.reason, ei.value.line) == ("line_too_long", 9)
    assert str(ei.value).startswith("s.jsonl:9: expected a JSON line of reasonable size")
    assert f"{DEFAULT_MAX_LINE_BYTES >> 20} MiB" in str(ei.value)


@pytest.mark.parametrize(("raw", "want"), [c[1:] for c in GOOD_ROWS], ids=[c[0] for c in GOOD_ROWS])
def test_good_line(raw: bytes, want: tuple[str, list[int], list[int], int, int]) -> None:
    row = parse_row(raw, shard="a/b.jsonl", line=4, offset=77)
    source, ids, mask, n_prompt, n_resp = want
    assert row.source == source
    assert row.input_ids.dtype == np.int64 and row.input_ids.tolist() == ids
    assert row.loss_mask.dtype == np.int8 and row.loss_mask.tolist() == mask
    assert (row.seq_len, row.n_prompt_tokens, row.n_response_tokens) == (len(ids), n_prompt, n_resp)
    assert row.prompt_ids.tolist() == ids[:n_prompt]
    assert (row.provenance.shard, row.provenance.line, row.provenance.offset) == (
        "a/b.jsonl",
        4,
        77,
    )


def test_case_ids_are_unique() -> None:
    names = [name for name, _ in LINES]
    assert len(names) == len(set(names))
