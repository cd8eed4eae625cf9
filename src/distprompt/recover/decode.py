"""Tokenizer loading, identity, prompt-span detokenization and the vocabulary check.

Nothing here assumes a template or a vocabulary: what is needed is read off the tokenizer.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distprompt.errors import TokenizerError

__all__ = ["TokenizerInfo", "decode", "decode_input", "encode_many", "load_tokenizer"]

logger = logging.getLogger("distprompt.recover.decode")


@dataclass(frozen=True, slots=True)
class TokenizerInfo:
    """Identity of the tokenizer a suite was decoded with (goes into the manifest).

    Attributes:
        name: What the user passed: a path or a hub id.
        kind: ``folder``, ``file`` or ``hub``.
        sha256: sha256 of ``tokenizer.json`` when there is one, else None.
        vocab_size: Number of ids the tokenizer can decode (added tokens included).
        has_chat_template: Whether a chat template was found.
    """

    name: str
    kind: str
    sha256: str | None
    vocab_size: int
    has_chat_template: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
            "has_chat_template": self.has_chat_template,
        }


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# How long the hub may take to answer before a hub id counts as unreachable: huggingface_hub's
# own retries on a refused connection took 47 s before it gave up.
HUB_PROBE_SECONDS = 5.0


def _hub_unreachable(name: str) -> str | None:
    """Why the hub cannot be asked for ``name`` (offline mode, no answer), or None."""
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    if constants.HF_HUB_OFFLINE or flag in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    url = f"{constants.ENDPOINT.rstrip('/')}/api/models/{name}"
    try:
        req = urllib.request.Request(url, method="HEAD")
        urllib.request.urlopen(req, timeout=HUB_PROBE_SECONDS).close()
    except urllib.error.HTTPError:
        return None  # it answered (404, 401 …): from_pretrained says what the answer means
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        return f"the hub at {constants.ENDPOINT} did not answer ({reason})"
    return None


def _from_hub(auto: Any, name: str) -> Any:
    """``name`` from the hub, or a :class:`TokenizerError` in seconds when it cannot be asked."""
    local = (
        "pass a local tokenizer folder instead (the one holding tokenizer.json and "
        f"tokenizer_config.json, e.g. from `huggingface-cli download {name} --local-dir DIR` "
        "on a machine with network) as --tokenizer"
    )
    why = _hub_unreachable(name)
    if why is not None:
        raise TokenizerError(
            f"{name}: expected a tokenizer folder, tokenizer.json or a cached hub id, found no "
            f"such path here, no cached copy, and {why}; {local}"
        )
    try:
        return auto.from_pretrained(name)
    except OSError as exc:
        raise TokenizerError(
            f"{name}: expected a tokenizer folder, tokenizer.json or hub id, found no such path "
            f"here and no hub tokenizer of that name; check the id, or {local}"
        ) from exc


def load_tokenizer(spec: str | os.PathLike[str] | Any) -> tuple[Any, TokenizerInfo]:
    """Load a tokenizer from a local folder, a ``tokenizer.json`` file or a hub id.

    A hub id is only fetched when the environment allows it (``HF_HUB_OFFLINE`` unset and a
    network); a locally cached copy is used otherwise. An already loaded ``transformers``
    tokenizer is accepted as is.

    Returns:
        The ``transformers`` tokenizer and its :class:`TokenizerInfo`.

    Raises:
        TokenizerError: Nothing loadable at ``spec``.

    Example:
        >>> tok, info = load_tokenizer("path/to/tokenizer_folder")  # doctest: +SKIP
        >>> info.vocab_size  # doctest: +SKIP
        151669
    """
    if not isinstance(spec, (str, os.PathLike)):
        return spec, _object_info(spec)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with warnings.catch_warnings():
        # transformers imports tqdm.auto, which warns in a notebook without ipywidgets; no bar
        # of the library is on there, so the warning is only noise
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoTokenizer, PreTrainedTokenizerFast

    name = str(spec)
    if not name.strip():
        raise TokenizerError(
            "expected a tokenizer folder, tokenizer.json or hub id, found an empty string; "
            "pass --tokenizer"
        )
    path = Path(spec).expanduser()  # "--tokenizer=~/tok" reaches us unexpanded
    try:
        tok, kind, tj = _load_path(path, name, AutoTokenizer, PreTrainedTokenizerFast)
    except TokenizerError:
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # transformers raises many types; tokenizers can even panic
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        found = f"{type(exc).__name__}: {first[:200]}" if first else type(exc).__name__
        raise TokenizerError(
            f"{name}: expected a loadable tokenizer, found {found}; pass a local tokenizer "
            "folder or tokenizer.json (hub ids need network or a cached copy)"
        ) from exc
    sha = _sha256(tj) if tj is not None and tj.is_file() else None
    info = TokenizerInfo(
        name=name,
        kind=kind,
        sha256=sha,
        vocab_size=len(tok),
        has_chat_template=bool(getattr(tok, "chat_template", None)),
    )
    logger.info(
        "tokenizer %s: %d ids, chat template: %s", name, info.vocab_size, info.has_chat_template
    )
    return tok, info


def _object_info(spec: Any) -> TokenizerInfo:
    """The :class:`TokenizerInfo` of an already loaded tokenizer.

    Raises:
        TokenizerError: ``spec`` is not a tokenizer.
    """
    if not hasattr(spec, "decode") or not hasattr(spec, "convert_ids_to_tokens"):
        raise TokenizerError(
            f"expected a tokenizer path, hub id or transformers tokenizer, found "
            f"{type(spec).__name__}"
        )
    name = str(getattr(spec, "name_or_path", "") or type(spec).__name__)
    tj = Path(name) / "tokenizer.json" if name else None
    sha = _sha256(tj) if tj is not None and tj.is_file() else None
    return TokenizerInfo(
        name=name,
        kind="object",
        sha256=sha,
        vocab_size=len(spec),
        has_chat_template=bool(getattr(spec, "chat_template", None)),
    )


def _load_path(path: Path, name: str, auto: Any, fast: Any) -> tuple[Any, str, Path | None]:
    """The tokenizer at ``path`` (a folder or a ``tokenizer.json``) or of hub id ``name``, how
    it was found, and its ``tokenizer.json`` where there is one.

    Raises:
        TokenizerError: A path that holds no tokenizer.
    """
    if path.is_dir():
        if not any(
            (path / f).is_file()
            for f in (
                "tokenizer.json",
                "tokenizer_config.json",
                "tokenizer.model",
                "vocab.json",
            )
        ):
            raise TokenizerError(
                f"{path}: expected a tokenizer folder (tokenizer.json or "
                "tokenizer_config.json), found none; pass the folder that holds them"
            )
        tok = auto.from_pretrained(str(path))
        kind = "folder"
        tj = path / "tokenizer.json"
    elif path.is_file():
        if (path.parent / "tokenizer_config.json").is_file():
            # The config beside it carries the chat template and special tokens.
            tok = auto.from_pretrained(str(path.parent))
        else:
            tok = fast(tokenizer_file=str(path))
        kind = "file"
        tj = path
    elif path.is_absolute() or name.startswith((".", "~")) or os.sep + os.sep in name:
        raise TokenizerError(
            f"{name}: expected a tokenizer folder or tokenizer.json, found nothing at that "
            "path; check --tokenizer"
        )
    else:
        try:  # a cached copy first: no network, no retries
            tok = auto.from_pretrained(name, local_files_only=True)
        except (OSError, ValueError):
            tok = _from_hub(auto, name)
        kind = "hub"
        tj = None
    return tok, kind, tj


def decode_input(tokenizer: Any, ids: Sequence[int] | np.ndarray) -> Any:
    """``ids`` as ``tokenizer.decode`` takes them fastest, the same ids: an int64 array for a
    ``transformers`` tokenizer (it turns one into a list in one call, ``tolist``, while a list
    it walks element by element first: in the export 0.39 s of 2,432 calls whose decoding took
    0.18 s), a list of ints for anything else."""
    arr = np.asarray(ids, dtype=np.int64)
    base = getattr(sys.modules.get("transformers"), "PreTrainedTokenizerBase", None)
    return arr if base is not None and isinstance(tokenizer, base) else arr.tolist()


def decode(tokenizer: Any, ids: Sequence[int] | np.ndarray, *, keep_special: bool = True) -> str:
    """Detokenize ``ids`` exactly as written: special tokens kept, no space clean-up."""
    return str(
        tokenizer.decode(
            decode_input(tokenizer, ids),
            skip_special_tokens=not keep_special,
            clean_up_tokenization_spaces=False,
        )
    )


def encode_many(
    tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool = False
) -> list[list[int]]:
    """The ids of each text, as ``tokenizer.encode(text, add_special_tokens=...)`` gives them.

    A ``transformers`` tokenizer encodes them in one call (a fast one on every core, without
    its per-call overhead: the round trip's 640 prompts and the suite's agent responses of tens
    of thousands of tokens); anything else with an ``encode`` one by one
    (``add_special_tokens`` passed to it only when False).

    Example:
        >>> encode_many(None, [])
        []
    """
    if not texts:
        return []
    base = getattr(sys.modules.get("transformers"), "PreTrainedTokenizerBase", None)
    if base is not None and isinstance(tokenizer, base):
        ids = tokenizer(list(texts), add_special_tokens=add_special_tokens)["input_ids"]
        return [list(x) for x in ids]
    if add_special_tokens:  # the default of every ``encode``: not passed
        return [list(tokenizer.encode(t)) for t in texts]
    return [list(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
