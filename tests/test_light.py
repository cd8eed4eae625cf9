"""The pass's checks read without transformers agree with the loaded tokenizer's, and the
pipeline reads DATA again (with a warning) when they do not."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import distprompt.pipeline
import distprompt.pipeline.schedule
from distprompt import build_suite
from distprompt.errors import TokenizerError
from distprompt.recover.checks import Checks, RowCheck, prepare_checks
from distprompt.recover.decode import load_tokenizer
from distprompt.recover.light import BackgroundLoad, light_checks, load_light
from distprompt.recover.markers import _PROBES
from styles import STYLES, style_tokenizer

from factories import make_corpus


def _spec(
    name: str, tmp_path: Path, qwen_dir: Path, deepseek_dir: Path, qwen_tokenizer: Any
) -> Path:
    if name == "qwen3":
        return qwen_dir
    if name == "deepseek-v3":
        return deepseek_dir
    if name == "deepseek-v3 tokenizer.json":
        return deepseek_dir / "tokenizer.json"
    if name == "qwen3 tokenizer.json alone":
        shutil.copy(qwen_dir / "tokenizer.json", tmp_path / "tokenizer.json")
        return tmp_path / "tokenizer.json"
    if name == "qwen3 folder without config":
        (tmp_path / "only").mkdir()
        shutil.copy(qwen_dir / "tokenizer.json", tmp_path / "only" / "tokenizer.json")
        return tmp_path / "only"
    # A template style saved as transformers saves it (chat_template.jinja beside the config).
    style_tokenizer(qwen_tokenizer, name).save_pretrained(tmp_path / name)
    return tmp_path / name


@pytest.mark.parametrize(
    "name",
    [
        "qwen3",
        "deepseek-v3",
        "deepseek-v3 tokenizer.json",
        "qwen3 tokenizer.json alone",
        "qwen3 folder without config",
        *STYLES,
    ],
)
def test_light_checks_equal_the_loaded_tokenizers(
    name: str, tmp_path: Path, qwen_dir: Path, deepseek_dir: Path, qwen_tokenizer: Any
) -> None:
    spec = _spec(name, tmp_path, qwen_dir, deepseek_dir, qwen_tokenizer)
    got = light_checks(spec)
    assert got is not None
    light, checks = got
    tok, info = load_tokenizer(spec)
    real = prepare_checks(tok, info.vocab_size)
    assert checks == real
    assert light.name == info.name and len(light) == len(tok) == info.vocab_size
    assert bool(light.chat_template) == info.has_chat_template
    if info.has_chat_template:
        assert checks.start or checks.gen  # every template here has markers to check
        for probe in _PROBES:  # the same text, not only the same markers
            for gen in (False, True):
                msgs = list(probe)
                want = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
                assert (
                    light.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
                    == want
                )
    else:
        assert checks.template_note == "expected a tokenizer with a chat template, found none"


def test_the_template_is_found_where_transformers_looks(
    tmp_path: Path, qwen_dir: Path, qwen_tokenizer: Any
) -> None:
    folder = tmp_path / "tok"
    shutil.copytree(qwen_dir, folder)
    (folder / "chat_template.jinja").write_text("<|im_start|>{{ messages[0]['content'] }}")
    light = load_light(folder)
    assert light is not None and light.chat_template == (folder / "chat_template.jinja").read_text()
    tok, _ = load_tokenizer(folder)
    assert tok.chat_template == light.chat_template  # the file wins over the config's template
    # Named templates with a default: the default one (no tools in the probes).
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text("tools")
    light = load_light(folder)
    assert light is not None and light.chat_template.startswith("<|im_start|>")
    # Named templates without a default: transformers needs a name, so it is not read here.
    (folder / "chat_template.jinja").unlink()
    assert load_light(folder) is None
    config = json.loads((qwen_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": "<|im_start|>x"}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    shutil.rmtree(folder / "additional_chat_templates")
    light = load_light(folder)
    assert light is not None and light.chat_template == "<|im_start|>x"


def test_special_tokens_reach_the_template_as_strings(deepseek_dir: Path) -> None:
    # DeepSeek-V3's config holds bos_token as an AddedToken dict; the template prints it.
    light = load_light(deepseek_dir)
    assert light is not None
    assert light.template_context["bos_token"] == "<｜begin▁of▁sentence｜>"
    text = light.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert isinstance(text, str) and text.startswith("<｜begin▁of▁sentence｜>")


def test_what_is_not_read_without_transformers(
    tmp_path: Path, qwen_dir: Path, qwen_tokenizer: Any
) -> None:
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "tokenizer.json").write_text('{"model": ')
    (tmp_path / "slow").mkdir()
    shutil.copy(qwen_dir / "tokenizer_config.json", tmp_path / "slow")
    shutil.copy(qwen_dir / "vocab.json", tmp_path / "slow")
    shutil.copy(qwen_dir / "merges.txt", tmp_path / "slow")
    for spec in (
        qwen_tokenizer,  # already loaded: nothing to save
        "Qwen/Qwen3-8B",  # a hub id
        "",
        tmp_path / "missing",
        tmp_path / "corrupt",
        tmp_path / "slow",  # no tokenizer.json
    ):
        assert light_checks(spec) is None, spec
    # A template that does not render a probe here may need what only transformers has.
    folder = tmp_path / "odd"
    shutil.copytree(qwen_dir, folder)
    (folder / "chat_template.jinja").write_text(
        "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}x"
    )
    assert load_light(folder) is not None and light_checks(folder) is None


def test_background_load_raises_in_the_caller(tmp_path: Path, qwen_dir: Path) -> None:
    loading = BackgroundLoad(tmp_path / "missing")
    loading.start()
    with pytest.raises(TokenizerError, match="found nothing at that path"):
        loading.result()
    tok, info = BackgroundLoad(qwen_dir).result()  # never started: loads in the caller
    assert info.vocab_size == len(tok)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, qwen_tokenizer: Any) -> Path:
    return make_corpus(tmp_path_factory.mktemp("light"), qwen_tokenizer, {"chat": 40, "code": 20})


def _same_suite(a: Any, b: Any) -> None:
    assert list(a) == list(b)
    # the warnings say how the tokenizer was read; the rest is the same
    assert dataclasses.replace(a.manifest, warnings=()) == dataclasses.replace(
        b.manifest, warnings=()
    )


@pytest.mark.parametrize(
    "wrong",
    [
        {"start": (1, 2, 3)},  # every row would fail the marker check
        {"gen": ()},
        {"vocab_size": 1000},  # the first row would be out of the vocabulary (a raised error)
    ],
    ids=["start", "gen", "vocab"],
)
@pytest.mark.parametrize("large", [False, True])
def test_checks_that_differ_read_data_again_with_a_warning(
    corpus: Path,
    qwen_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    wrong: dict[str, Any],
    large: bool,
) -> None:
    normal_warnings: list[str] = []
    normal = build_suite(
        corpus, tokenizer=qwen_dir, per_source=5, recover_turns=False, warn=normal_warnings.append
    )
    assert not any("without transformers" in w for w in normal_warnings)
    if large:  # the pass in a worker process, sources selected (and decoded) during it
        monkeypatch.setattr(distprompt.pipeline.schedule, "OVERLAP_BYTES", 0)

    def wrong_checks(spec: Any) -> tuple[Any, Checks] | None:
        got = light_checks(spec)
        assert got is not None
        c = dataclasses.replace(got[1], **wrong)
        return got[0], dataclasses.replace(c, row_check=RowCheck(start=c.start, gen=c.gen))

    passes: list[Any] = []
    real_scan = distprompt.pipeline.scan

    def counting_scan(*args: Any, **kwargs: Any) -> Any:
        passes.append((kwargs["check"], kwargs["vocab_size"]))
        return real_scan(*args, **kwargs)

    monkeypatch.setattr(distprompt.pipeline, "light_checks", wrong_checks)
    monkeypatch.setattr(distprompt.pipeline, "scan", counting_scan)
    warnings: list[str] = []
    again = build_suite(
        corpus, tokenizer=qwen_dir, per_source=5, recover_turns=False, warn=warnings.append
    )
    _same_suite(again, normal)
    assert len(passes) == 2 and passes[1] != passes[0]
    (msg,) = [w for w in warnings if "without transformers" in w]
    what = {"start": "start markers", "gen": "generation prompt", "vocab_size": "vocabulary size"}
    assert what[next(iter(wrong))] in msg and "read again" in msg
    assert again.manifest.warnings == tuple(warnings)


def test_no_second_pass_when_the_checks_agree(
    corpus: Path, qwen_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_scan = distprompt.pipeline.scan

    def counting_scan(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real_scan(*args, **kwargs)

    def not_before_the_pass(spec: Any) -> Any:  # the fallback order would call it here
        raise AssertionError("the tokenizer was loaded before the pass")

    monkeypatch.setattr(distprompt.pipeline, "scan", counting_scan)
    monkeypatch.setattr(distprompt.pipeline, "load_tokenizer", not_before_the_pass)
    suite = build_suite(corpus, tokenizer=qwen_dir, per_source=5, recover_turns=False)
    assert len(calls) == 1 and len(suite) == 10


def test_fallback_loads_the_tokenizer_before_the_pass(
    corpus: Path, qwen_dir: Path, qwen_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    real_scan = distprompt.pipeline.scan
    real_load = distprompt.pipeline.load_tokenizer

    def scan(*args: Any, **kwargs: Any) -> Any:
        order.append("pass")
        return real_scan(*args, **kwargs)

    def load(spec: Any) -> Any:
        order.append("tokenizer")
        return real_load(spec)

    monkeypatch.setattr(distprompt.pipeline, "scan", scan)
    monkeypatch.setattr(distprompt.pipeline, "load_tokenizer", load)
    by_object = build_suite(corpus, tokenizer=qwen_tokenizer, per_source=5, recover_turns=False)
    assert order == ["tokenizer", "pass"]
    by_path = build_suite(corpus, tokenizer=qwen_dir, per_source=5, recover_turns=False)
    assert list(by_object) == list(by_path)
