"""``dsh-sandbox mcp --print-config CLIENT``: the snippet that registers the server with a client.

The command is this very executable, by absolute path (a client starts the
server with its own ``PATH`` and cwd), and the arguments are ``mcp`` plus the
flags given beside ``--print-config``, with every file or directory they name
made absolute for the same reason.  Without ``--workspace`` the server's
workspace is the directory the client starts it in.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any

#: The name the server is registered under.
NAME = "dsh-sandbox"

#: Flags whose value is a path: made absolute in the snippet.
_PATH_FLAGS = frozenset({"workspace", "composition"})

#: Parameter name -> flag, in the order they are written.
_FLAGS: tuple[tuple[str, str], ...] = (
    ("composition", "--composition"),
    ("shell", "--shell"),
    ("mode", "--mode"),
    ("profile", "--profile"),
    ("workspace", "--workspace"),
    ("runner", "--runner"),
    ("approval", "--approval"),
    ("env", "--env"),
    ("image", "--image"),
    ("accept_degraded", "--accept-degraded"),
    ("allow_domain", "--allow-domain"),
    ("deny_domain", "--deny-domain"),
    ("trust_project", "--trust-project"),
    ("persistent", "--persistent"),
    ("max_concurrent_calls", "--max-concurrent-calls"),
)
_DEFAULTS: Mapping[str, Any] = {"shell": "bash", "max_concurrent_calls": 8}


def _absolute(value: str) -> str:
    return os.path.abspath(os.path.expanduser(value))


def _profile(value: str) -> str:
    # A built-in or user profile is a name; a file is a path (it has a slash or ends .toml).
    return _absolute(value) if "/" in value or value.endswith(".toml") else value


def _approval(value: str) -> str:
    return f"rules:{_absolute(value[len('rules:'):])}" if value.startswith("rules:") else value


def server_args(params: Mapping[str, Any]) -> list[str]:
    """``mcp`` and the given flags, paths absolute."""
    args = ["mcp"]
    for name, flag in _FLAGS:
        value = params.get(name)
        if value in (None, False, (), _DEFAULTS.get(name)):
            continue
        if value is True:
            args.append(flag)
        elif name == "env":
            for key, val in value:
                args += [flag, f"{key}={val}"]
        elif isinstance(value, tuple):
            for item in value:
                args += [flag, str(item)]
        elif name in _PATH_FLAGS:
            args += [flag, _absolute(str(value))]
        elif name == "profile":
            args += [flag, _profile(str(value))]
        elif name == "approval":
            args += [flag, _approval(str(value))]
        else:
            args += [flag, str(value)]
    return args


def executable() -> list[str]:
    """This program, by absolute path: the console script when run as one,
    else the interpreter with ``-P -m dsh.cli`` (``-P``: the client's working
    directory, often the project, is not put on the import path, where a
    sandboxed command could plant a module the server would import)."""
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(script).startswith("dsh-sandbox") and os.access(script, os.X_OK):
        return [script]
    return [os.path.abspath(sys.executable), "-P", "-m", "dsh.cli"]


def _toml_string(value: str) -> str:
    # A JSON string with every non-ASCII character escaped is a TOML basic string.
    return json.dumps(value, ensure_ascii=True)


def client_config(client: str, params: Mapping[str, Any]) -> str:
    """The snippet for ``client`` (claude, codex or cursor), newline-terminated."""
    command, *prefix = executable()
    args = [*prefix, *server_args(params)]
    if client == "claude":
        return (f"# Run in your project (add --scope user for every project):\n"
                f"claude mcp add {NAME} -- {shlex.join([command, *args])}\n")
    if client == "codex":
        listed = ", ".join(_toml_string(a) for a in args)
        return (f"# In ~/.codex/config.toml:\n[mcp_servers.{NAME}]\n"
                f"command = {_toml_string(command)}\nargs = [{listed}]\n")
    if client == "cursor":
        body = {"mcpServers": {NAME: {"command": command, "args": args}}}
        return json.dumps(body, indent=2) + "\n"
    raise ValueError(f"unknown client {client!r}")
