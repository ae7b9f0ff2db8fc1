"""Validation of a provider's config against its ``Config`` dataclass.

Composition entries come from YAML/TOML files people write, so every mistake
is a ``CompositionError`` naming the entry, the field and what it must be.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from dsh.sandbox.errors import CompositionError
from dsh.sandbox.lazy_pattern import LazyPattern


def build_config(config_cls: type[Any], raw: Mapping[str, Any], *, entry: str, provider: str) -> Any:
    """Validate ``raw`` against ``config_cls`` (a provider's ``Config`` dataclass) and build it.

    Unknown fields and wrong types are errors naming the entry and the field;
    ``provider`` is the provider's name, for the message.
    """
    if not isinstance(raw, Mapping):
        raise CompositionError(f"entry {entry!r}: config must be a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for key in raw:
        if key not in fields:
            known = ", ".join(sorted(fields)) or "(none)"
            raise CompositionError(
                f"entry {entry!r}: unknown config field {key!r} for {provider}; "
                f"known fields: {known}"
            )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key] = _coerce(value, hints.get(key, Any), entry=entry, field=key)
    try:
        return config_cls(**values)
    except (TypeError, ValueError) as exc:
        raise CompositionError(f"entry {entry!r}: invalid config: {exc}") from None


#: Fields whose strings name files or directories: held to the kernel's limits.
_PATH_FIELD = LazyPattern(r"(cwd|workspace|workdir|path|dir|file|profile|home|root|writable|tty)", re.IGNORECASE)


def _coerce(value: Any, hint: Any, *, entry: str, field: str) -> Any:
    ok, coerced = _check(value, hint)
    if not ok:
        raise CompositionError(
            f"entry {entry!r}: config field {field!r} must be {_describe(hint)}, got {value!r}"
        )
    for text in _strings(coerced):
        from dsh.sandbox.input_files import path_problem, text_problem

        problem = path_problem(text) if _PATH_FIELD.search(field) else text_problem(text, limit=128 * 1024)
        if problem is not None:
            raise CompositionError(f"entry {entry!r}: config field {field!r}: {text[:40]!r}: {problem}; fix the value")
    if isinstance(coerced, (int, float)) and not isinstance(coerced, bool):
        from dsh.sandbox.numeric import NumberError, config_number

        try:
            # The value as written: an int past the bound must not be rounded into it by a float field.
            config_number(field, value if isinstance(value, (int, float)) else coerced)
        except NumberError as exc:
            raise CompositionError(f"entry {entry!r}: config field {exc}") from None
    return coerced


def _strings(value: Any) -> list[str]:
    """Every string in a config value (lists and mappings included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, Mapping):
        return [s for pair in value.items() for item in pair for s in _strings(item)]
    return []


def _check(value: Any, hint: Any) -> tuple[bool, Any]:
    if hint is Any:
        return True, value
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            ok, coerced = _check(value, arg)
            if ok:
                return True, coerced
        return False, value
    if origin is typing.Literal:
        return (value in args), value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if origin in (tuple, list) or hint in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False, value
        inner = args[0] if args else Any
        out = []
        for item in value:
            ok, coerced = _check(item, inner)
            if not ok:
                return False, value
            out.append(coerced)
        return True, tuple(out) if origin is tuple or hint is tuple else out
    if origin in (dict, Mapping) or hint in (dict,):
        if not isinstance(value, Mapping):
            return False, value
        return True, dict(value)
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value


def _describe(hint: Any) -> str:
    if hint is Any:
        return "any value"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if hint is type(None):
        return "null"
    if origin in (tuple, list):
        return f"a list of {_describe(args[0]) if args else 'values'}"
    return getattr(hint, "__name__", str(hint))
