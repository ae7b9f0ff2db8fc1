"""Argv and environment as JSON text carries them (an OCI process file for
runsc, the Docker API).

JSON strings cannot hold arbitrary bytes: a byte that is not UTF-8 reaches the
other side as U+FFFD (tested for both), so passing such an argv as-is would
silently change it.  UTF-8 argv goes through unchanged; an argv with any other
bytes is sent as ASCII ``printf`` formats (octal escapes) that the exec wrapper
turns back into the exact bytes inside the sandbox.  The environment has no
such wrapper, so its non-UTF-8 values are refused, naming ``carrier``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from dsh.sandbox.errors import UsageError

_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("\\"), ord("%")}


def _as_bytes(item: str | bytes, what: str) -> bytes:
    if isinstance(item, bytes):
        raw = item
    elif isinstance(item, str):
        raw = os.fsencode(item)  # surrogate-escaped str -> its original bytes
    else:
        raise UsageError(f"{what} {item!r} is not text or bytes")
    if b"\0" in raw:
        raise UsageError(f"{what} {item!r} contains a NUL byte, which no argv can carry")
    return raw


def printf_format(raw: bytes) -> str:
    """An ASCII printf format that prints exactly ``raw``."""
    return "".join(chr(b) if b in _PLAIN else f"\\{b:03o}" for b in raw)


def encode_argv(argv: Sequence[str | bytes]) -> tuple[list[str], bool]:
    """(the items as JSON text, whether the wrapper must decode them as printf formats)."""
    if isinstance(argv, str | bytes) or not argv:
        raise UsageError("argv: the command is empty; pass the program and its arguments")
    raw = [_as_bytes(item, f"argv[{i}]") for i, item in enumerate(argv)]
    try:
        return [item.decode("utf-8") for item in raw], False
    except UnicodeDecodeError:
        return [printf_format(item) for item in raw], True


def _text(item: str | bytes, what: str, carrier: str) -> str:
    raw = _as_bytes(item, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(
            f"{what} {item!r} is not valid UTF-8; {carrier} carries the environment as JSON text, so it "
            "cannot be passed exactly; use the landlock or bwrap runner for non-UTF-8 values"
        ) from None


def text_env(env: Mapping[str, str], carrier: str) -> dict[str, str]:
    """``env`` as JSON text (refused when a name or value cannot be)."""
    out: dict[str, str] = {}
    for key, value in env.items():
        name = _text(key, "environment variable name", carrier)
        if not name or "=" in name:
            raise UsageError(f"environment variable name {name!r} is empty or contains '='")
        out[name] = _text(value, f"environment variable {name}", carrier)
    return out
