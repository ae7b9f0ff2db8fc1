"""Tool definitions as the model sees them, and argument checking against them.

A ``ToolSpec`` is a name, a model-facing description and a JSON Schema (draft
2020-12 subset) of the arguments; it exports as an OpenAI-style
``{"type": "function", "function": {...}}`` or an Anthropic-style
``{"name", "description", "input_schema"}`` tool.  ``validate_args`` checks a
call against the same schema, so what is advertised is exactly what is
accepted: wrong types, unknown fields, out-of-range numbers and unknown enum
values become one ``ArgumentError`` listing every problem, and nothing runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dsh.sandbox.errors import DshError

SpecFormat = Literal["openai", "anthropic"]


class ArgumentError(DshError):
    """Tool arguments that do not fit the tool's schema."""

    code = "TOOL_ARGUMENTS"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _plain(self.parameters),
            },
        }

    def anthropic(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": _plain(self.parameters),
        }

    def export(self, fmt: SpecFormat) -> dict[str, Any]:
        return self.openai() if fmt == "openai" else self.anthropic()


def _plain(value: Any) -> Any:
    """A JSON-ready deep copy (mappings to dicts, tuples to lists)."""
    result: Any = json.loads(json.dumps(value))
    return result


def object_schema(properties: Mapping[str, Mapping[str, Any]], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: dict(v) for k, v in properties.items()},
        "required": list(required),
        "additionalProperties": False,
    }


_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "boolean": "true or false",
    "number": "a number",
    "object": "an object",
}


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        # JSON has one number type: 5.0 is an integer, 5.5 and true are not.
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        # json.loads accepts NaN and Infinity, and every range check is false for NaN.
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "object":
        return isinstance(value, Mapping)
    return True


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_property(name: str, value: Any, schema: Mapping[str, Any]) -> tuple[str | None, Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and not _type_ok(value, kind):
        return f"{name}: must be {_TYPE_WORDS.get(kind, kind)}, got {_short(value)}", value
    if kind == "integer":
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(json.dumps(c) for c in schema["enum"])
        return f"{name}: must be one of {choices}, got {_short(value)}", value
    if isinstance(value, str):
        if "\0" in value:
            # No command, path or argv can hold one: running what precedes it would
            # run something other than what was asked.
            return f"{name}: contains a NUL byte, which no command or path can hold; remove it", value
        if len(value) < schema.get("minLength", 0):
            return f"{name}: must not be empty", value
        if len(value) > schema.get("maxLength", len(value)):
            return f"{name}: is longer than {schema['maxLength']} characters", value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"between {low} and {high}" if low is not None and high is not None else (
                f"at least {low}" if low is not None else f"at most {high}"
            )
            return f"{name}: must be {bounds}, got {_short(value)}", value
    return None, value


def validate_args(spec: ToolSpec, args: Any) -> dict[str, Any]:
    """Check ``args`` against ``spec.parameters``; return them normalised
    (integers as ``int``) or raise ``ArgumentError`` naming every problem."""
    schema = spec.parameters
    if not isinstance(args, Mapping):
        raise ArgumentError(
            f"invalid arguments for {spec.name}: expected a JSON object, got {_short(args)}. "
            "Nothing was run."
        )
    props: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    problems: list[str] = []
    out: dict[str, Any] = {}
    for key, value in args.items():
        if key not in props:
            if schema.get("additionalProperties", True) is False:
                allowed = ", ".join(props) or "none"
                problems.append(f"{key}: unknown field (allowed: {allowed})")
            continue
        problem, normalised = _check_property(key, value, props[key])
        if problem:
            problems.append(problem)
        else:
            out[key] = normalised
    for key in schema.get("required", []):
        if key not in args:
            problems.append(f"{key}: required field is missing")
    if problems:
        raise ArgumentError(
            f"invalid arguments for {spec.name}: " + "; ".join(problems) + ". Nothing was run."
        )
    return out
