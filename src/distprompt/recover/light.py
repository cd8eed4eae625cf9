"""What the pass needs from a tokenizer, read without ``transformers``.

The pass needs only the vocabulary size and the template's markers (:func:`learn_markers`).
Loading a ``transformers`` tokenizer takes seconds (the import alone), so the pipeline reads a
local ``tokenizer.json`` with the ``tokenizers`` library, renders the chat template with
``jinja2`` the way ``transformers`` does, starts the pass with the markers learned from that, and
loads the real tokenizer meanwhile; after the pass it learns the markers again from the real one
and reads the corpus once more if anything differs (see :func:`distprompt.pipeline.build_suite`).

:func:`light_checks` returns None (and logs why at debug level) for anything it does not read
itself: a hub id, an already loaded tokenizer, a folder without ``tokenizer.json``, a file
``tokenizers`` cannot load, several chat templates without a default, or a template that fails
to render a probe here (it may need something only ``transformers`` provides). The pipeline then
loads the real tokenizer first, as it always did.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distprompt.errors import TemplateError
from distprompt.recover.checks import Checks, learn_layouts, prepare_checks

__all__ = ["BackgroundLoad", "LightTokenizer", "light_checks", "load_light"]

logger = logging.getLogger("distprompt.recover.light")

#: The special tokens ``transformers`` passes to every chat template (``special_tokens_map``).
_NAMED = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclass(frozen=True, slots=True)
class LightTokenizer:
    """A ``tokenizers.Tokenizer`` with its chat template: enough for :func:`learn_layouts`.

    Attributes:
        name: What the user passed (as :class:`~distprompt.recover.decode.TokenizerInfo.name`).
        backend: The ``tokenizers.Tokenizer`` read from ``tokenizer.json``.
        chat_template: The template ``transformers`` would use, or None.
        template_context: The special tokens the template sees (``bos_token`` ...).
    """

    name: str
    backend: Any
    chat_template: str | None
    template_context: Mapping[str, Any]

    def __len__(self) -> int:
        """Ids the tokenizer knows, added tokens included (what ``len()`` of the real one is)."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def added_tokens_decoder(self) -> dict[int, Any]:
        """The added tokens by id (what the real one's attribute of that name holds)."""
        return dict(self.backend.get_added_tokens_decoder())

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        *,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int] | str:
        """Render and encode a conversation as ``transformers``' ``apply_chat_template`` does.

        Raises:
            TemplateError: No chat template.
        """
        if not self.chat_template:
            raise TemplateError("expected a tokenizer with a chat template, found none")
        messages = [{k: v for k, v in dict(m).items() if v is not None} for m in conversation]
        text = _compile(self.chat_template).render(
            messages=messages,
            tools=list(tools) if tools else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self.template_context,
        )
        if not tokenize:
            return str(text)
        return list(self.backend.encode(text, add_special_tokens=False).ids)


def light_checks(spec: Any) -> tuple[LightTokenizer, Checks] | None:
    """The pass's checks learned from a :class:`LightTokenizer`, or None when it cannot tell.

    None when :func:`load_light` cannot read ``spec``, or the chat template fails to render one
    of the probes here: the caller then loads the real tokenizer first.

    Example:
        >>> got = light_checks("path/to/tokenizer_folder")  # doctest: +SKIP
        >>> light, checks = got  # doctest: +SKIP
        >>> checks.vocab_size  # doctest: +SKIP
        151669
    """
    light = load_light(spec)
    if light is None:
        return None
    if not light.chat_template:
        return light, prepare_checks(light, len(light))  # the same note as the real one's
    try:
        markers = learn_layouts(light, strict=True)
    except TemplateError as exc:
        logger.debug("%s: chat template not rendered without transformers: %s", spec, exc)
        return None
    return light, Checks.of(len(light), markers)


def load_light(spec: Any) -> LightTokenizer | None:
    """Read a local tokenizer folder or ``tokenizer.json`` with ``tokenizers``, or None.

    The chat template is found where ``transformers`` looks: ``chat_template.jinja`` beside the
    config wins over ``chat_template`` in ``tokenizer_config.json``; with templates under
    ``additional_chat_templates/`` (or a list of named templates in the config), the ``default``
    one. A ``tokenizer.json`` without ``tokenizer_config.json`` beside it has no template.
    """
    if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
        logger.debug("%r: not a local tokenizer path, loaded with transformers", spec)
        return None
    path = Path(spec).expanduser()
    if path.is_dir():
        folder, tj, with_config = path, path / "tokenizer.json", True
    elif path.is_file():
        folder, tj = path.parent, path
        with_config = (folder / "tokenizer_config.json").is_file()
    else:
        logger.debug("%s: not a local path (a hub id?), loaded with transformers", spec)
        return None
    if not tj.is_file():
        logger.debug("%s: no tokenizer.json, loaded with transformers", spec)
        return None
    try:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(tj))
        config: dict[str, Any] = {}
        if with_config and (folder / "tokenizer_config.json").is_file():
            config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        template = _template(folder, config) if with_config else None
        context = _context(folder, config) if with_config else {}
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # tokenizers can panic; json, OSError, a malformed config
        logger.debug("%s: not read without transformers (%s: %s)", spec, type(exc).__name__, exc)
        return None
    if template is _NO_DEFAULT:
        logger.debug("%s: several chat templates and no default, loaded with transformers", spec)
        return None
    assert template is None or isinstance(template, str)
    return LightTokenizer(str(spec), backend, template, context)


_NO_DEFAULT = object()


def _template(folder: Path, config: Mapping[str, Any]) -> object:
    """The template ``transformers`` would render the probes with (no tools), None, or
    :data:`_NO_DEFAULT`."""
    found: dict[str, str] = {}
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        found["default"] = jinja.read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            found[f.name.removesuffix(".jinja")] = f.read_text(encoding="utf-8")
    if not found:
        value = config.get("chat_template")
        if isinstance(value, (list, tuple)):
            found = {str(t["name"]): str(t["template"]) for t in value}
        elif isinstance(value, dict):
            found = {str(k): str(v) for k, v in value.items()}
        else:
            return str(value) if value else None
    if "default" in found:
        return found["default"]
    return _NO_DEFAULT


def _token(value: Any) -> str | None:
    if isinstance(value, dict):  # an AddedToken as saved: {"__type": "AddedToken", "content": ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _context(folder: Path, config: Mapping[str, Any]) -> dict[str, Any]:
    """The special tokens ``transformers`` passes to the template, as strings."""
    values: dict[str, Any] = dict(config)
    stm = folder / "special_tokens_map.json"
    if "added_tokens_decoder" not in config and stm.is_file():
        # Legacy folders: transformers merges special_tokens_map.json into the config.
        values.update(json.loads(stm.read_text(encoding="utf-8")))
    out: dict[str, Any] = {}
    for key in _NAMED:
        tok = _token(values.get(key))
        if tok is not None:
            out[key] = tok
    if _transformers_major() < 5:
        # transformers 4's special_tokens_map also held the additional special tokens.
        extra = [t for t in map(_token, values.get("additional_special_tokens") or []) if t]
        if extra:
            out["additional_special_tokens"] = extra
    return out


def _transformers_major() -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("transformers").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 5


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    """Compile a chat template in the environment ``transformers`` renders templates in.

    The same sandbox, whitespace options, extensions and globals as ``transformers``'
    ``_compile_jinja_template``: ``tojson`` without HTML escaping, ``raise_exception``,
    ``strftime_now``, a ``dict`` and a ``namespace`` that refuse private names, and a
    ``{% generation %}`` block that renders its body.
    """
    from datetime import datetime

    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}  # noqa: RUF012 - jinja reads the class attribute

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
                lineno
            )

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore-prefixed attributes, found {name!r}"
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(template)


class BackgroundLoad:
    """:func:`~distprompt.recover.decode.load_tokenizer` in a thread while the pass runs (an
    :class:`~distprompt.engine.background.InThread`).

    Start it only once the pass's worker processes exist (``scan(on_started=...)``): a process
    forked while a thread imports ``transformers`` could inherit a held import lock.
    :meth:`result` joins the thread (or loads here when it never started) and raises what the
    load raised.

    Example:
        >>> loading = BackgroundLoad("path/to/tokenizer_folder")  # doctest: +SKIP
        >>> part = scan(shards, on_started=loading.start, ...)  # doctest: +SKIP
        >>> tok, info = loading.result()  # doctest: +SKIP
    """

    def __init__(self, spec: Any) -> None:
        from distprompt.engine.background import InThread

        self._job: InThread[tuple[Any, Any]] = InThread(
            functools.partial(_load, spec), name="distprompt-tokenizer"
        )

    def start(self) -> None:
        """Start loading in a daemon thread (once)."""
        self._job.start()

    def loaded(self) -> tuple[Any, Any] | None:
        """For another thread: the loaded ``(tokenizer, TokenizerInfo)`` once loaded (this
        waits), None if the load failed or was not started (:meth:`result` says why)."""
        return self._job.wait()

    def result(self) -> tuple[Any, Any]:
        """The loaded ``(tokenizer, TokenizerInfo)``.

        Raises:
            TokenizerError: As :func:`~distprompt.recover.decode.load_tokenizer`.
        """
        return self._job.result()


def _load(spec: Any) -> tuple[Any, Any]:
    from distprompt.recover.decode import load_tokenizer

    return load_tokenizer(spec)
