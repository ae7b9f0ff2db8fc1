"""Argv and environment as the Docker API carries them: JSON text.

JSON strings cannot hold arbitrary bytes: a surrogate-escaped byte reaches
the daemon as U+FFFD (tested), so the argv would silently change.  Items that
are not valid UTF-8 are refused instead (use landlock or bwrap for raw bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dsh.sandbox.errors import UsageError

_HINT = ("the Docker API carries argv and env as JSON text, so it cannot be passed exactly; "
         "use the landlock or bwrap runner for non-UTF-8 arguments")


def _text(item: str | bytes, what: str) -> str:
    if isinstance(item, bytes):
        try:
            item = item.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{what} {item!r} is not valid UTF-8; {_HINT}") from None
    elif not isinstance(item, str):
        raise UsageError(f"{what} {item!r} is not text")
    try:
        item.encode("utf-8")  # lone surrogates (surrogateescape'd bytes) fail here
    except UnicodeEncodeError:
        raise UsageError(f"{what} {item!r} holds undecodable bytes; {_HINT}") from None
    if "\0" in item:
        raise UsageError(f"{what} {item!r} contains a NUL byte, which no argv can carry")
    return item


def text_argv(argv: Sequence[str | bytes]) -> list[str]:
    if isinstance(argv, str | bytes) or not argv:
        raise UsageError("argv must be a non-empty list of arguments")
    return [_text(item, f"argv[{i}]") for i, item in enumerate(argv)]


def text_env(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        name = _text(key, "environment variable name")
        if not name or "=" in name:
            raise UsageError(f"environment variable name {name!r} is empty or contains '='")
        out[name] = _text(value, f"environment variable {name}")
    return out
