"""Argv and environment as an OCI process file carries them: JSON text.

JSON strings cannot hold arbitrary bytes (runsc turns a byte that is not UTF-8
into U+FFFD, tested), so passing such an argv as-is would silently change it.
UTF-8 argv goes through unchanged; an argv with any other bytes is sent as
ASCII ``printf`` formats that the exec wrapper turns back into the exact bytes
inside the sandbox.  The environment has no such wrapper: its non-UTF-8
values are refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from dsh.sandbox.errors import UsageError

_ENV_HINT = ("runsc carries the environment as JSON text, so it cannot be passed exactly; "
             "use the landlock or bwrap runner for non-UTF-8 values")
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
    """(items for the process file, whether the wrapper must decode them as printf formats)."""
    if isinstance(argv, str | bytes) or not argv:
        raise UsageError("argv: the command is empty; pass the program and its arguments")
    raw = [_as_bytes(item, f"argv[{i}]") for i, item in enumerate(argv)]
    try:
        return [item.decode("utf-8") for item in raw], False
    except UnicodeDecodeError:
        return [printf_format(item) for item in raw], True


def _text(item: str | bytes, what: str) -> str:
    raw = _as_bytes(item, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {item!r} is not valid UTF-8; {_ENV_HINT}") from None


def text_env(env: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE`` items of ``env`` (refused when a name or value cannot be JSON text)."""
    out: list[str] = []
    for key, value in env.items():
        name = _text(key, "environment variable name")
        if not name or "=" in name:
            raise UsageError(f"environment variable name {name!r} is empty or contains '='")
        out.append(f"{name}={_text(value, f'environment variable {name}')}")
    return out
