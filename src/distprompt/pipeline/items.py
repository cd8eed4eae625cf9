"""The suite's items from the chosen candidates: their prompts read back where the pass did not
keep them, decoded, their turns recovered (:func:`make_items`, in batches a worker can run).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from distprompt.config import Config
from distprompt.pipeline.sources import Chosen
from distprompt.read.readback import load_candidates
from distprompt.records import Candidate, Shard, SuiteItem, max_tokens_for
from distprompt.recover.decode import TokenizerInfo, decode

__all__ = [
    "Pick",
    "item_id",
    "learn_profile",
    "make_batch",
    "make_item",
    "make_items",
    "picks_of",
    "read_back",
]


def learn_profile(tok: Any, tinfo: TokenizerInfo, warn: Callable[[str], None]) -> Any:
    """The tokenizer's chat-template profile for turn recovery; None (said through ``warn``)
    when it has no template or the template cannot be learned."""
    if not tinfo.has_chat_template:
        warn(f"tokenizer {tinfo.name!r} has no chat template: messages are not recovered")
        return None
    from distprompt.errors import TemplateError
    from distprompt.recover.template import learn_template

    try:
        return learn_template(tok)
    except TemplateError as exc:
        warn(f"chat template not usable for turn recovery: {exc}")
        return None


def item_id(source: str, prompt_ids: Sequence[int] | np.ndarray) -> str:
    """Stable item id: a hash of the source and the prompt ids (independent of the seed)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(source.encode("utf-8") + b"\x00")
    h.update(np.ascontiguousarray(prompt_ids, dtype="<i8").tobytes())
    return f"{_slug(source)}-{h.hexdigest()}"


def _slug(s: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_" else "_" for c in s)
    return out[:40] or "source"


class Pick(NamedTuple):
    """A selected candidate read back, with its item's cluster number (it pickles: Ray tasks
    decode batches of them).

    Attributes:
        candidate: The representative, its prompt and first response read back.
        cluster: The item's cluster number within its source (its place in the selection).
        size: Its cluster's size.
        weight: The corpus rows it stands for.
        stratum: The stratum it was picked in.
    """

    candidate: Candidate
    cluster: int
    size: int
    weight: float
    stratum: str


def read_back(chosen: Sequence[Chosen], shards: Sequence[Shard], config: Config) -> list[Chosen]:
    """``chosen`` with each candidate's prompt, prompt mask and first response read back from
    ``shards`` (:func:`~distprompt.read.readback.load_candidates`), where the source was
    selected: :func:`picks_of` takes them as they are then.

    Raises:
        InputError: A shard cannot be read, or changed since the pass.
    """
    loaded = load_candidates([c.candidate for c in chosen], shards, seed=config.seed)
    return [c._replace(candidate=cand) for cand, c in zip(loaded, chosen, strict=True)]


def picks_of(chosen: Sequence[Chosen], shards: Sequence[Shard], config: Config) -> list[Pick]:
    """A source's selection ``(candidate, cluster size, weight)`` read back from its shards
    (but the candidates :func:`read_back` read already), with each item's cluster number."""
    loaded = load_candidates([c.candidate for c in chosen], shards, seed=config.seed)
    return [
        Pick(cand, cluster, c.size, c.weight, c.stratum)
        for cluster, (cand, c) in enumerate(zip(loaded, chosen, strict=True))
    ]


def make_batch(picks: Sequence[Pick], shared: tuple[Any, Any, Config]) -> list[SuiteItem]:
    tokenizer, profile, config = shared
    return [
        make_item(
            p.candidate,
            cluster=p.cluster,
            size=p.size,
            weight=p.weight,
            stratum=p.stratum,
            tokenizer=tokenizer,
            profile=profile,
            config=config,
        )
        for p in picks
    ]


def make_items(
    picks: list[Pick],
    *,
    tokenizer: Any,
    profile: Any,
    config: Config,
    warn: Callable[[str], None],
) -> list[SuiteItem]:
    """Decode the picks (and recover their turns) here, or with ``engine="ray"`` as one Ray task
    per CPU of the cluster over consecutive picks, in order: the same items either way."""
    shared = (tokenizer, profile, config)
    if config.engine != "ray" or len(picks) < 2:
        return make_batch(picks, shared)
    import contextlib

    from distprompt.engine import UnitFailure, connect_ray, ray_map

    ray = connect_ray(config.ray_address)
    n = max(1, min(len(picks), int(ray.cluster_resources().get("CPU", 1))))
    step = -(-len(picks) // n)
    batches = [picks[i : i + step] for i in range(0, len(picks), step)]
    names = [f"items {i + 1}-{min(i + step, len(picks))}" for i in range(0, len(picks), step)]
    items: list[SuiteItem] = []
    results = ray_map(make_batch, batches, names=names, address=config.ray_address, shared=shared)
    with contextlib.closing(results):
        for batch, res in zip(batches, results, strict=True):
            if isinstance(res, UnitFailure):
                warn(
                    f"decoding {res.name} on Ray failed {res.attempts} times ({res.reason}); "
                    "decoded on the driver instead"
                )
                res = make_batch(batch, shared)
            items.extend(res)
    return items


def make_item(
    cand: Candidate,
    *,
    cluster: int,
    size: int,
    weight: float,
    stratum: str,
    tokenizer: Any,
    profile: Any,
    config: Config,
) -> SuiteItem:
    assert cand.prompt_ids is not None and cand.prompt_mask is not None
    assert cand.response_ids is not None
    prompt_ids = [int(i) for i in cand.prompt_ids]
    max_tokens = max_tokens_for(int(cand.response_ids.shape[0]), config.max_output_tokens)
    messages = tools = None
    fidelity = reason = structure = None
    template_kwargs = None
    ambiguities: tuple[Any, ...] = ()
    if profile is not None:
        from distprompt.recover.turns import recover_turns

        rec = recover_turns(
            prompt_ids,
            tokenizer=tokenizer,
            profile=profile,
            loss_mask=[int(m) for m in cand.prompt_mask],
        )
        messages, tools, fidelity, reason = rec.messages, rec.tools, rec.fidelity, rec.reason
        template_kwargs = rec.chat_template_kwargs
        structure = rec.structure
        ambiguities = rec.ambiguities
    return SuiteItem(
        id=item_id(cand.source, cand.prompt_ids),
        source=cand.source,
        prompt=decode(tokenizer, prompt_ids),
        n_prompt_tokens=cand.n_prompt_tokens,
        n_response_tokens=cand.n_response_tokens,
        max_tokens=max_tokens,
        cluster=cluster,
        cluster_size=size,
        weight=round(weight, 9),
        stratum=stratum,
        provenance=cand.provenance,
        prompt_ids=tuple(prompt_ids),
        response=decode(tokenizer, cand.response_ids, keep_special=False),
        response_ids=tuple(cand.response_ids.tolist()),
        duplicates=cand.count,
        messages=messages,
        tools=tools,
        fidelity=fidelity,
        fidelity_reason=reason,
        chat_template_kwargs=template_kwargs,
        structure=structure,
        ambiguities=ambiguities,
    )
