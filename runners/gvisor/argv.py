"""Argv and environment as an OCI process file carries them: JSON text (see
``dsh.runners.linux.json_argv``); the process file lists ``KEY=VALUE`` items."""

from __future__ import annotations

from collections.abc import Mapping

from dsh.runners.linux.json_argv import encode_argv
from dsh.runners.linux.json_argv import text_env as _text_env

__all__ = ["encode_argv", "text_env"]


def text_env(env: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE`` items of ``env`` (refused when a name or value cannot be JSON text)."""
    return [f"{name}={value}" for name, value in _text_env(env, "runsc").items()]
