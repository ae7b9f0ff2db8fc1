"""A tiny JSON Schema checker for the subset ``profiles/schema.json`` uses.

The project takes no dependency for this; when ``jsonschema`` happens to be
installed the tests run it too.  Supported: ``type``, ``enum``, ``properties``,
``additionalProperties: false``, ``items``, ``pattern``, ``minLength``,
``minimum``, ``exclusiveMinimum``, ``oneOf`` and local ``$ref``.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_ok(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def errors(value: Any, schema: dict[str, Any], root: dict[str, Any], where: str = "$") -> list[str]:
    """Every violation of ``schema`` by ``value``, as ``"<path>: <problem>"``."""
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        return errors(value, node, root, where)
    out: list[str] = []
    if "type" in schema and not _type_ok(value, schema["type"]):
        return [f"{where}: expected {schema['type']}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} not one of {schema['enum']}")
    if "oneOf" in schema:
        matches = sum(not errors(value, sub, root, where) for sub in schema["oneOf"])
        if matches != 1:
            out.append(f"{where}: {value!r} matches {matches} of oneOf, expected 1")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: too short")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: {value} < {schema['minimum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{where}: {value} <= {schema['exclusiveMinimum']}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            out.extend(errors(item, schema["items"], root, f"{where}[{index}]"))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                out.extend(errors(item, props[key], root, f"{where}.{key}"))
            elif schema.get("additionalProperties") is False:
                out.append(f"{where}: unknown key {key!r}")
    return out
