"""Tests for :mod:`distprompt.recover.decode`: tokenizer loading, identity and detokenization."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from distprompt.errors import TokenizerError
from distprompt.recover.decode import decode, encode_many, load_tokenizer

from factories import chat_rows


def test_a_folder_loads_with_its_identity(qwen_dir: Path, qwen_tokenizer: Any) -> None:
    tok, info = load_tokenizer(qwen_dir)
    assert info.kind == "folder" and info.name == str(qwen_dir)
    assert info.sha256 == hashlib.sha256((qwen_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert info.vocab_size == len(tok) == len(qwen_tokenizer)
    assert info.has_chat_template
    assert set(info.to_dict()) == {"name", "kind", "sha256", "vocab_size", "has_chat_template"}


def test_a_tokenizer_json_beside_its_config_keeps_the_template(deepseek_dir: Path) -> None:
    tok, info = load_tokenizer(deepseek_dir / "tokenizer.json")
    assert info.kind == "file" and info.has_chat_template
    assert info.sha256 == hashlib.sha256((deepseek_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert info.vocab_size == len(tok)


def test_a_loaded_tokenizer_is_taken_as_is(qwen_tokenizer: Any) -> None:
    tok, info = load_tokenizer(qwen_tokenizer)
    assert tok is qwen_tokenizer
    assert info.kind == "object" and info.vocab_size == len(qwen_tokenizer)
    with pytest.raises(TokenizerError, match="found int"):
        load_tokenizer(42)
    with pytest.raises(TokenizerError, match="empty string"):
        load_tokenizer("  ")


def test_the_prompt_span_decodes_to_text_that_retokenizes_to_its_ids(any_tokenizer: Any) -> None:
    for row in chat_rows(any_tokenizer, "chat", 6, seed=1):
        ids = row["input_ids"][: row["n_prompt_tokens"]]
        text = decode(any_tokenizer, ids)
        assert any_tokenizer.encode(text, add_special_tokens=False) == ids
        # special tokens are kept by default and dropped on request
        special = set(any_tokenizer.all_special_ids) & set(ids)
        plain = decode(any_tokenizer, ids, keep_special=False)
        assert special and len(plain) < len(text)
        for t in special:
            assert any_tokenizer.convert_ids_to_tokens(t) not in plain


@pytest.mark.parametrize("special", [False, True])
def test_encode_many_gives_the_ids_of_encode_one_text_at_a_time(
    any_tokenizer: Any, special: bool
) -> None:
    texts = ["", "Hello", "Ünïcödé — 漢字 and code: def f(x):\n    return x", " lead", "a\n\n\tb"]
    want = [any_tokenizer.encode(t, add_special_tokens=special) for t in texts]
    assert encode_many(any_tokenizer, texts, add_special_tokens=special) == want

    class EncodeOnly:  # no batch call: one text at a time, the keyword only when False
        def encode(self, text: str, **kw: Any) -> list[int]:
            assert kw in ({}, {"add_special_tokens": False})
            return list(any_tokenizer.encode(text, **kw))

    assert encode_many(EncodeOnly(), texts, add_special_tokens=special) == want
    assert encode_many(any_tokenizer, []) == []


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
        # a refused connection: huggingface_hub retried for 47 s before it failed
        ({"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:{port}"}, "did not answer"),
    ],
)
def test_an_unknown_hub_id_without_network_fails_at_once_naming_a_local_folder(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    """Issue 28: fail in one probe (no retries) and say how to pass a local folder."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on once the socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v.format(port=port) for k, v in env.items()}
    run_env = {**os.environ, **env, "HF_HOME": str(tmp_path / "hf")}  # nothing cached
    code = (
        "from distprompt.recover.decode import load_tokenizer\n"
        "load_tokenizer('nosuch-org/nosuch-tokenizer')\n"
    )
    # The timeout only guards against a hang; the message shows the single probe was taken.
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=run_env, timeout=40
    )
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("distprompt.errors.TokenizerError: nosuch-org/nosuch-tokenizer:"), last
    assert why in last and "pass a local tokenizer folder" in last, last
    assert "huggingface-cli download nosuch-org/nosuch-tokenizer --local-dir DIR" in last
