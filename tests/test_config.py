"""The options door: :class:`Config`, :func:`resolve` and the choices the CLI derives from it."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from distprompt import Config, ConfigError
from distprompt.config import ALLOCATIONS, ENGINES, METHODS, ON_ERROR, Method, resolve


def test_resolve_applies_overrides_and_keeps_the_rest() -> None:
    base = Config(seed=7, method="random")
    got = resolve(base, lsa_dims=8, length_weight=0.0)
    assert (got.seed, got.method, got.lsa_dims, got.length_weight) == (7, "random", 8, 0.0)
    assert base.lsa_dims == 64  # frozen: the base is not changed


def test_a_total_replaces_the_per_source_default() -> None:
    assert resolve(total=100).per_source is None
    assert resolve(Config(per_source=5), total=10).per_source is None
    with pytest.raises(ConfigError, match="either per_source or total"):
        resolve(total=10, per_source=5)


def test_an_unknown_option_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="found lsa_dim") as exc:
        resolve(lsa_dim=8)
    assert "lsa_dims" in str(exc.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("method", "medoids"),
        ("allocation", "log"),
        ("on_error", "ignore"),
        ("engine", "spark"),
        ("lsa_dims", 0),
        ("length_weight", -1.0),
        ("near_duplicate", 0.0),
        ("workers", True),
    ],
)
def test_invalid_values_are_refused_before_any_shard_is_read(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        Config(**{field: value})  # type: ignore[arg-type]


def test_choice_lists_are_the_literals() -> None:
    assert METHODS == get_args(Method) == ("herding", "kmedoids", "random")
    assert set(ALLOCATIONS) == {"proportional", "sqrt", "equal"}
    assert ON_ERROR == ("raise", "skip")
    assert ENGINES == ("local", "ray")


def test_the_cli_offers_exactly_the_config_choices() -> None:
    from typer.testing import CliRunner

    from distprompt.cli import app

    out = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "250"}).output
    for choices in (METHODS, ALLOCATIONS, ON_ERROR, ENGINES):
        assert "|".join(choices) in out, choices


def test_every_config_field_is_a_cli_option_of_export() -> None:
    """Both surfaces reach every option (the CLI spells booleans as --no-turns and
    --no-tokenizer-check)."""
    import typer

    from distprompt.cli import app

    export = typer.main.get_command(app).commands["export"]  # type: ignore[attr-defined]
    names = {p.name for p in export.params}
    renamed = {"recover_turns": "no_turns", "check_tokenizer": "no_tokenizer_check"}
    missing = {
        f.name for f in dataclasses.fields(Config) if renamed.get(f.name, f.name) not in names
    }
    assert not missing


def test_min_per_source_without_total_is_refused_not_ignored() -> None:
    """Issue 28: a floor of total's split meant nothing beside per_source, silently."""
    with pytest.raises(ConfigError, match="expected min_per_source with total"):
        resolve(per_source=20, min_per_source=5)
    with pytest.raises(ConfigError, match="expected min_per_source with total"):
        resolve(min_per_source=1)
    assert resolve(total=100, min_per_source=5).min_per_source == 5


def test_every_field_carries_its_option() -> None:
    """Issue 31: help, reference text, group and CLI spelling live on the field, once."""
    from distprompt.config import COMMAND_GROUPS, GROUPS, options

    opts = options()
    assert [o.name for o in opts] == [f.name for f in dataclasses.fields(Config)]
    for o in opts:
        assert o.help and o.doc and o.group in GROUPS, o.name
        assert o.default == getattr(Config(), o.name), o.name
        assert o.flag.startswith("--") and o.param.isidentifier(), o.name
        assert o.name in (Config.__doc__ or ""), f"{o.name} is not in Config's docstring"
    assert {o.name for o in options("pass")} == {"workers", "glob", "engine", "ray_address"}
    assert set(COMMAND_GROUPS["export"]) == set(GROUPS)
    with pytest.raises(ConfigError, match="found nope"):
        options("nope")  # type: ignore[arg-type]


def test_the_cli_options_are_made_from_the_metadata() -> None:
    """Spelling, help, default and bounds of each generated option are the field's."""
    import typer

    from distprompt.cli import app
    from distprompt.config import COMMAND_GROUPS, options

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for command, groups in COMMAND_GROUPS.items():
        params = {p.name: p for p in commands[command].params}
        for o in options(*groups):
            p = params[o.param]
            assert [*p.opts, *p.secondary_opts] == o.flag.split("/"), o.name
            assert p.help == o.help and p.default == o.cli_default, o.name
            assert (p.min, p.metavar) == (o.min, o.metavar), o.name


def test_output_options_are_checked_by_config() -> None:
    """The temperature and the output options used to be arguments checked while writing,
    after the pass; they are fields now, refused or normalized at once."""
    assert Config(formats="openai, sharegpt,openai").formats == ("openai", "sharegpt")
    assert Config(formats=["token_ids"]).formats == ("token_ids",)
    assert Config(formats=()).formats == () and Config().formats is None
    for bad in (
        {"formats": "openai,csv"},
        {"formats": 3},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"temperature": -0.1},
        {"temperature": "0.5"},
        {"ignore_eos": 1},
        {"overwrite": "yes"},
        {"progress": None},
        {"recover_turns": 0},
        {"near_duplicate": "0.9"},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Config(**bad)  # type: ignore[arg-type]
    assert Config(temperature=1).temperature == 1


def test_the_manifest_records_what_decides_the_suite() -> None:
    from distprompt.config import options

    recorded = Config().recorded()
    assert set(recorded) == {o.name for o in options() if o.recorded}
    assert not recorded.keys() & {"workers", "engine", "ray_address", "formats", "temperature"}
    assert recorded["seed"] == 0 and "glob" in recorded


def test_export_suite_refuses_a_bad_temperature_before_any_shard(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 31: export_suite(temperature=-1) failed when the files were written, after the
    pass. The shard here fails as soon as it is opened, the tokenizer does not exist."""
    from distprompt import export_suite

    data = tmp_path / "data"
    data.mkdir()
    (data / "tokenized_data.jsonl.gz").write_bytes(b"not gzip\n")
    for bad in ({"temperature": -1.0}, {"formats": ["csv"]}, {"overwrite": "no"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            export_suite(data, tmp_path / "out", tokenizer=tmp_path / "no-tok", **bad)
    assert not (tmp_path / "out").exists()


def test_errors_name_each_option_as_the_library_spells_it() -> None:
    """``errors.api_message`` turns a flag in a message into the library's argument; its table
    of flags (errors.py imports nothing, so it cannot read the metadata) agrees with it."""
    from distprompt.config import options
    from distprompt.errors import api_message

    for o in options():
        flag = o.flag.split("/")[0]
        if isinstance(o.default, bool) and "/" not in o.flag:
            assert api_message(flag) == f"`{o.name}={o.negate is False}`", o.name
        else:
            assert api_message(flag) == f"`{o.name}`", o.name
