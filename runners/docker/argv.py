"""Argv and environment as the Docker API carries them: JSON text (see
``dsh.runners.linux.json_argv``)."""

from __future__ import annotations

from collections.abc import Mapping

from dsh.runners.linux.json_argv import encode_argv
from dsh.runners.linux.json_argv import text_env as _text_env

__all__ = ["encode_argv", "text_env"]


def text_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as the API takes it (refused when a name or value cannot be JSON text)."""
    return _text_env(env, "the Docker API")
