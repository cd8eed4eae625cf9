"""The reader's one report of what it passed over (:class:`distprompt.read.tally.Tally`)."""

from __future__ import annotations

import pytest

from distprompt.errors import DataError
from distprompt.read.tally import Tally


def _bad(line: int, reason: str = "not_json", shard: str = "a.jsonl") -> DataError:
    return DataError(shard, line, reason, "expected a JSON object, found garbage; fix the line")


def test_raise_mode_raises_the_row_error_and_counts_nothing() -> None:
    tally = Tally()
    with pytest.raises(DataError) as ei:
        tally.bad(_bad(7))
    assert ei.value.line == 7 and ei.value.reason == "not_json"
    assert not tally.skipped and not tally.first_skip


def test_skip_mode_counts_by_reason_with_the_first_place() -> None:
    tally = Tally(on_error="skip")
    for line, reason in ((9, "not_json"), (3, "not_json"), (5, "seq_len_mismatch")):
        tally.bad(_bad(line, reason))
    tally.anomaly("blank_line", "a.jsonl:2")
    tally.anomaly("blank_line", "a.jsonl:4")
    assert tally.skipped == {"not_json": 2, "seq_len_mismatch": 1}
    assert tally.first_skip == {"not_json": "a.jsonl:9", "seq_len_mismatch": "a.jsonl:5"}
    assert tally.anomalies == {"blank_line": 2}
    assert tally.first_anomaly == {"blank_line": "a.jsonl:2"}


def test_merge_adds_counts_and_keeps_the_earliest_place_in_line_order() -> None:
    a, b = Tally(on_error="skip"), Tally(on_error="skip")
    a.skip("not_json", "a.jsonl:10")
    b.skip("not_json", "a.jsonl:9")  # line 9 < line 10 although "10" < "9" as text
    b.skip("corrupt_stream", "b.jsonl.zst:1")
    b.anomaly("blank_line", "a.jsonl:1")
    a.merge(b)
    assert a.skipped == {"not_json": 2, "corrupt_stream": 1}
    assert a.first_skip == {"not_json": "a.jsonl:9", "corrupt_stream": "b.jsonl.zst:1"}
    assert a.first_anomaly == {"blank_line": "a.jsonl:1"}


def test_rebase_shifts_only_the_places_of_that_shard() -> None:
    tally = Tally(on_error="skip")
    tally.skip("not_json", "a.jsonl:3")
    tally.skip("line_too_long", "b.jsonl:3")
    tally.anomaly("blank_line", "a.jsonl:1")
    tally.rebase("a.jsonl", 100)
    assert tally.first_skip == {"not_json": "a.jsonl:103", "line_too_long": "b.jsonl:3"}
    assert tally.first_anomaly == {"blank_line": "a.jsonl:101"}
