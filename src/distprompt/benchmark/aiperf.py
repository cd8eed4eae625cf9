"""``distprompt bench-import``: join an AIPerf run's per-request export back to the suite items.

AIPerf (0.13.0, ``docs/tutorials/working-with-profile-exports.md``) writes one JSON record a
request to ``profile_export.jsonl``: ``metadata`` (``conversation_id``, ``turn_index``,
``request_start_ns``, ``request_end_ns``, …), ``metrics`` (``{"value", "unit"}`` per tag:
``time_to_first_token``, ``inter_chunk_latency``, ``output_token_count``, and with a speculative
vLLM server ``spec_decode_acceptance_length``, ``spec_decode_draft_acceptance_rate`` (percent),
``spec_decode_steps``, ``spec_decode_accepted_draft_tokens``, ``spec_decode_draft_tokens``
— ``src/aiperf/metrics/types/spec_decode_metrics.py``) and ``error``.

A record is matched to a suite item by its ``conversation_id`` when that is an item id (the
``aiperf_multi_turn.jsonl`` export names each session by the item id), else through the run's
``inputs.json`` (``session_id`` → the payloads sent) by the text of the last user turn, which is
what ``aiperf.jsonl`` sends. Of a multi-turn session only the last turn is the item's request:
the earlier turns are kept as requests of the same item (``turn`` < ``turns`` − 1) for the speed
figures — the server served them — without acceptance figures, which stay the item's own.

Every source runs in one window in an AIPerf run (``meta["interleaved"]``): a source's request/s
and tok/s are its share of the run's, and the corpus figures divide by the run's time, not the sum
of the sources' windows. The header's URL, model, temperature and the concurrency come from
``profile_export_aiperf.json`` (``input_config``: ``endpoint.urls``, ``models.items[].name``,
``endpoint.extra``, ``phases[].concurrency`` in 0.13.0, ``loadgen.concurrency`` before) and the
payloads of ``inputs.json``. ``tests/data/aiperf_multi_turn`` is such a run, written by the real
``aiperf`` 0.13.0 CLI (``scripts/make_aiperf_artifact.py``).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson

from distprompt.benchmark.results import BenchResults, check_results_dir
from distprompt.benchmark.traffic import reply_kind, source_shares
from distprompt.errors import InputError, api_spelling
from distprompt.records import SuiteItem
from distprompt.write.formats import last_user_text, text_of

__all__ = ["PROFILE_EXPORT", "import_aiperf"]

PROFILE_EXPORT = "profile_export.jsonl"
_SCALE = {"ms": 1e-3, "ns": 1e-9, "us": 1e-6, "s": 1.0, "sec": 1.0}


def _metric(metrics: dict[str, Any], tag: str) -> Any:
    m = metrics.get(tag)
    return m.get("value") if isinstance(m, dict) else None


def _seconds(metrics: dict[str, Any], tag: str) -> Any:
    m = metrics.get(tag)
    if not isinstance(m, dict) or m.get("value") is None:
        return None
    k = _SCALE.get(str(m.get("unit", "ms")), 1e-3)
    v = m["value"]
    return [float(x) * k for x in v] if isinstance(v, list) else float(v) * k


def _payload_text(payload: Any) -> str | None:
    """The last user text of a request payload AIPerf sent (chat or completions)."""
    if not isinstance(payload, dict):
        return None
    msgs = payload.get("messages")
    if isinstance(msgs, list):
        users = [
            text_of(m.get("content"))
            for m in msgs
            if isinstance(m, dict) and m.get("role") == "user"
        ]
        return users[-1] if users else None
    prompt = payload.get("prompt")
    return prompt if isinstance(prompt, str) else None


def _find(run_dir: Path) -> Path:
    hits = (
        [run_dir / PROFILE_EXPORT]
        if (run_dir / PROFILE_EXPORT).is_file()
        else sorted(run_dir.rglob(PROFILE_EXPORT))
    )
    if len(hits) != 1:
        raise InputError(
            f"{run_dir}: expected one AIPerf {PROFILE_EXPORT}, found {len(hits)}; pass the "
            "artifact folder of one `aiperf profile` run"
        )
    return hits[0]


@api_spelling
def import_aiperf(
    run_dir: str | os.PathLike[str],
    *,
    suite: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    concurrency: int | None = None,
    label: str | None = None,
    overwrite: bool = False,
) -> BenchResults:
    """Turn an AIPerf run into bench results joined to the suite's sources and clusters.

    Args:
        run_dir: AIPerf artifact folder (holds ``profile_export.jsonl``, ideally ``inputs.json``).
        suite: The suite folder the AIPerf input file was exported from.
        out: Results folder to write (same files as ``distprompt bench``); None: none.
        concurrency: Concurrency label of the run (default: read from
            ``profile_export_aiperf.json``, else 1).
        label: Name of the run (default ``aiperf``).
        overwrite: Replace a previous result in ``out``.

    Returns:
        The results; ``meta["unmatched"]`` counts records that match no item, by reason.

    Raises:
        InputError: No AIPerf export, or a line that is not JSON.

    Example:
        >>> res = import_aiperf("artifacts/run1", suite="suite/")  # doctest: +SKIP
    """
    from distprompt.write.suite import Suite

    run = Path(run_dir)
    path = _find(run)
    if out is not None:
        check_results_dir(Path(out), overwrite=overwrite)
    s = Suite.load(suite)
    by_id = {it.id: it for it in s.items}
    texts: dict[str, list[SuiteItem]] = defaultdict(list)
    for it in s.items:
        texts[last_user_text(it)].append(it)
    sessions: dict[str, list[Any]] = {}
    inputs = path.parent / "inputs.json"
    if inputs.is_file():
        data = orjson.loads(inputs.read_bytes()).get("data", [])
        sessions = {str(d.get("session_id")): d.get("payloads") or [] for d in data}
    c = concurrency or _concurrency(path.parent) or 1
    records = _records(path)
    out_rows, unmatched = _joined(records, by_id, texts, sessions, c)
    srcs = sorted({row["source"] for row in out_rows})
    errors = Counter(row["error_kind"] for row in out_rows if row["error_kind"])
    setting = _setting(path.parent, sessions)
    meta = {
        "label": label or "aiperf",
        "api": "aiperf",
        "url": setting.get("url"),
        "model": setting.get("model"),
        "temperature": setting.get("temperature"),
        "ignore_eos": setting.get("ignore_eos"),
        "interleaved": True,  # every source in one window: rates divide by the run's time
        "traffic": "aiperf",
        "suite": str(suite),
        "aiperf_run": str(run),
        "items": len({row["id"] for row in out_rows}),
        "sources": srcs,
        "shares": source_shares(s.manifest, srcs),
        "shares_from": "manifest rows",
        "concurrency": [c],
        "complete": True,
        "errors": dict(sorted(errors.items())),
        "unmatched": dict(sorted(unmatched.items())),
        "records": len(records),
        "earlier_turns": sum(1 for row in out_rows if row["turn"] < row["turns"] - 1),
    }
    res = BenchResults(out_rows, meta)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        res.save(out, overwrite=True)
    return res


def _records(path: Path) -> list[dict[str, Any]]:
    """The records of AIPerf's ``profile_export.jsonl``.

    Raises:
        InputError: A line is not JSON.
    """
    records = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if line.strip():
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}: expected a JSON record, found {exc}") from exc
    return records


def _joined(
    records: list[dict[str, Any]],
    by_id: dict[str, SuiteItem],
    texts: dict[str, list[SuiteItem]],
    sessions: dict[str, list[Any]],
    c: int,
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The records as bench rows joined to their items (by session id, else by the text of the
    session's last turn), and the records that match none, counted by reason."""
    turns_of: dict[str, int] = {}
    for r in records:
        md = r.get("metadata") or {}
        cid = str(md.get("conversation_id"))
        turns_of[cid] = max(turns_of.get(cid, 0), int(md.get("turn_index") or 0) + 1)
    t0 = min(
        (int((r.get("metadata") or {}).get("request_start_ns") or 0) for r in records), default=0
    )
    unmatched: Counter[str] = Counter()
    out_rows = []
    for r in records:
        md = r.get("metadata") or {}
        cid = str(md.get("conversation_id"))
        turn = int(md.get("turn_index") or 0)
        last = turns_of[cid] - 1
        item = by_id.get(cid)
        if item is None:
            payloads = sessions.get(cid)
            if payloads is None:
                unmatched["no inputs.json entry for the conversation"] += 1
                continue
            # the item is the session's last request; its earlier turns are found through it
            text = _payload_text(payloads[last] if last < len(payloads) else None)
            cands = texts.get(text or "\0", [])
            if len(cands) != 1:
                why = "text matches no item" if not cands else "text matches several items"
                unmatched[why] += 1
                continue
            item = cands[0]
        out_rows.append(_row(r, item, c, t0, turn=turn, turns=last + 1))
    return out_rows, unmatched


def _concurrency(run: Path) -> int | None:
    """The run's concurrency: ``input_config.loadgen.concurrency`` (before 0.13), else the
    profiling phase's ``input_config.phases[].concurrency`` (0.13.0)."""
    p = run / "profile_export_aiperf.json"
    if not p.is_file():
        return None
    try:
        cfg = orjson.loads(p.read_bytes()).get("input_config") or {}
        v = (cfg.get("loadgen") or {}).get("concurrency")
        if not v:
            phases = [x for x in cfg.get("phases") or () if isinstance(x, dict)]
            prof = [x for x in phases if "profiling" in (x.get("kind"), x.get("name"))]
            v = next((x.get("concurrency") for x in prof or phases if x.get("concurrency")), None)
        return int(v) if v else None
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return None


def _first(value: Any) -> Any:
    """The first of a list (AIPerf keeps URLs and model names in lists), else the value."""
    return (value[0] if value else None) if isinstance(value, list) else value


def _setting(run: Path, sessions: dict[str, list[Any]]) -> dict[str, Any]:
    """URL, model, temperature and ignore_eos of the run, where the artifact records them."""
    out: dict[str, Any] = {}
    p = run / "profile_export_aiperf.json"
    cfg: Any = {}
    if p.is_file():
        try:
            cfg = orjson.loads(p.read_bytes()).get("input_config") or {}
        except (orjson.JSONDecodeError, AttributeError):
            cfg = {}
    if isinstance(cfg, dict):
        endpoint = cfg.get("endpoint") or {}
        if isinstance(endpoint, dict):
            out["url"] = _first(endpoint.get("urls")) or endpoint.get("url")
            out["model"] = _first(endpoint.get("model_names"))
            extra = endpoint.get("extra")  # --extra-inputs, sent with every request
            if isinstance(extra, dict):
                for key in ("temperature", "ignore_eos"):
                    if key in extra:
                        out[key] = extra[key]
        models = cfg.get("models") or {}
        if not out.get("model") and isinstance(models, dict):
            named = _first(models.get("items"))
            out["model"] = named.get("name") if isinstance(named, dict) else named
    # what was sent: the request bodies of inputs.json
    for payloads in sessions.values():
        body = payloads[0] if payloads and isinstance(payloads[0], dict) else {}
        out["model"] = out.get("model") or body.get("model")
        for key in ("temperature", "ignore_eos"):
            if key in body:
                out[key] = body[key]
        break
    return {k: v for k, v in out.items() if v is not None}


def _row(
    r: dict[str, Any], item: SuiteItem, c: int, t0: int, *, turn: int, turns: int
) -> dict[str, Any]:
    md = r.get("metadata") or {}
    m = r.get("metrics") or {}
    err = r.get("error")
    if turn < turns - 1:
        # an earlier turn of the item's session: speed figures only, the acceptance is the
        # item's (its recorded reply is the last turn's)
        m = {k: v for k, v in m.items() if not k.startswith("spec_decode_")}
    rate = _metric(m, "spec_decode_draft_acceptance_rate")
    n_out = _metric(m, "output_token_count")
    if n_out is None:
        n_out = _metric(m, "output_sequence_length")
    start = (int(md.get("request_start_ns") or t0) - t0) * 1e-9
    end = (int(md.get("request_end_ns") or md.get("request_start_ns") or t0) - t0) * 1e-9
    acc_len = _metric(m, "spec_decode_acceptance_length")
    return {
        "id": item.id,
        "source": item.source,
        "cluster": item.cluster,
        "weight": item.weight,
        "concurrency": c,
        "api": "aiperf",
        "traffic": "aiperf",
        "reply_kind": reply_kind(item),
        "n_prompt_tokens": item.n_prompt_tokens if turn == turns - 1 else None,
        "max_tokens": item.max_tokens if turn == turns - 1 else None,
        "turn": turn,
        "turns": turns,
        "start": start,
        "end": end,
        "ttft": None if err else _seconds(m, "time_to_first_token"),
        "itl": [] if err else (_seconds(m, "inter_chunk_latency") or []),
        "output_tokens": 0 if err else int(n_out or 0),
        "output_tokens_counted": n_out is not None,
        "finish_reason": None,
        "error_kind": f"aiperf:{err.get('type', 'error')}"
        if isinstance(err, dict)
        else ("aiperf:error" if err else None),
        "error": (err.get("message") if isinstance(err, dict) else str(err)) if err else None,
        "spec_steps": _metric(m, "spec_decode_steps"),
        "spec_accepted": _metric(m, "spec_decode_accepted_draft_tokens"),
        "spec_drafted": _metric(m, "spec_decode_draft_tokens"),
        "accept_length": None if err or acc_len is None else float(acc_len),
        "accept_rate": None if err or rate is None else float(rate) / 100.0,
        "spec_histogram": None,
        "spec_origin": "aiperf" if acc_len is not None else None,
    }
