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
