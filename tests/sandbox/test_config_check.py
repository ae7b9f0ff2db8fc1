"""A provider's config is checked against its ``Config`` dataclass
(``sandbox/config_check.py``): every mistake a person can write in a
composition is a ``CompositionError`` naming the entry and the field."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pytest
from dsh.sandbox.config_check import build_config
from dsh.sandbox.context import Service
from dsh.sandbox.errors import CompositionError, ConfigError


@dataclass(frozen=True)
class ToyConfig:
    cwd: str = "."
    name: str = "toy"
    timeout_ms: int = 1000
    ratio: float = 1.0
    enabled: bool = False
    kind: Literal["a", "b"] = "a"
    image: str | None = None
    roots: tuple[str, ...] = ()
    labels: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    anything: Any = None

    def __post_init__(self) -> None:
        if self.name == "reserved":
            raise ValueError("name 'reserved' is taken")


class Toy(Service):
    key: ClassVar[str] = "toy"
    plugin_name: ClassVar[str] = "toy-provider"
    Config: ClassVar[type[Any]] = ToyConfig


def build(raw: Any) -> Any:
    return build_config(Toy.Config, raw, entry="t1", provider=Toy.plugin_name)


def refusal(raw: Any) -> str:
    with pytest.raises(CompositionError) as caught:
        build(raw)
    assert isinstance(caught.value, ConfigError) and caught.value.code == "COMPOSITION_ERROR"
    return str(caught.value)


def test_good_values_build_the_dataclass_with_coercions() -> None:
    config = build({"cwd": "/w", "timeout_ms": 5, "ratio": 2, "enabled": True, "kind": "b", "image": None,
                    "roots": ["/a", "/b"], "labels": ("x",), "env": {"K": "v"}, "anything": [1]})
    assert config == ToyConfig(cwd="/w", timeout_ms=5, ratio=2.0, enabled=True, kind="b", image=None,
                               roots=("/a", "/b"), labels=["x"], env={"K": "v"}, anything=[1])
    assert isinstance(config.ratio, float) and isinstance(config.roots, tuple) and isinstance(config.labels, list)
    assert build({}) == ToyConfig()


def test_config_must_be_a_mapping() -> None:
    assert refusal(["cwd"]) == "entry 't1': config must be a mapping, got list"


def test_unknown_fields_are_named_with_the_known_ones() -> None:
    assert refusal({"cwdd": "/w"}) == (
        "entry 't1': unknown config field 'cwdd' for toy-provider; known fields: anything, cwd, enabled, env, "
        "image, kind, labels, name, ratio, roots, timeout_ms"
    )


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("timeout_ms", True, "int"),  # a bool is not a number
    ("timeout_ms", 1.5, "int"),
    ("timeout_ms", "5", "int"),
    ("ratio", "1", "float"),
    ("enabled", 1, "bool"),
    ("kind", "c", "one of 'a', 'b'"),
    ("image", 5, "str or null"),
    ("roots", "/a", "a list of str"),
    ("roots", ["/a", 5], "a list of str"),
    ("env", ["K=v"], "dict"),
])
def test_wrong_types_name_the_field_and_what_it_must_be(key: str, value: object, expected: str) -> None:
    assert refusal({key: value}) == f"entry 't1': config field {key!r} must be {expected}, got {value!r}"


def test_path_fields_are_held_to_the_kernels_limits() -> None:
    message = refusal({"cwd": "/w/" + "x" * 300})
    assert message.startswith("entry 't1': config field 'cwd': ")
    assert "over the 255-byte limit for a name; fix the value" in message
    assert "contains a NUL byte; fix the value" in refusal({"roots": ["/ok", "/a\0b"]})


def test_other_strings_are_held_to_the_text_limits() -> None:
    assert "contains a NUL byte" in refusal({"name": "a\0b"})
    assert "over the 131072-character limit" in refusal({"name": "x" * (128 * 1024 + 1)})
    assert "contains a NUL byte" in refusal({"env": {"K\0": "v"}})  # keys of a mapping too
    assert build({"name": "x" * 300}).name == "x" * 300  # a long name is no path


@pytest.mark.parametrize("value", [math.inf, math.nan, -1, 2**53 + 1])
def test_numbers_are_finite_and_bounded(value: float) -> None:
    assert refusal({"ratio": value}).startswith("entry 't1': config field ratio: must be a finite number from 0 to ")


def test_the_dataclass_own_check_is_reported_for_the_entry() -> None:
    assert refusal({"name": "reserved"}) == "entry 't1': invalid config: name 'reserved' is taken"
