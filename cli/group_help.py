"""``dsh-sandbox --help`` answered before click is imported, when click would print the same.

Importing click and rendering the group's help costs several times an
interpreter's start.  The text below is what click prints for the group when
the only commands are this package's own: at a width of 80 columns or more
(click wraps to at most 78), and with no other package adding a command
through the entry-point group.  Otherwise ``group_help`` returns ``None`` and
click renders it.  A test renders it with click and compares, so a change to
a command's help that is not made here too fails there.
"""

from __future__ import annotations

import os
import sys

#: Entry-point group of commands other packages add (a runner's own tools,
#: e.g. building its image): ``name = module:attr`` naming a click command.
COMMAND_GROUP = "dsh_sandbox.commands"

#: That group as this package alone fills it: command -> the distribution adding it.
OWN_ADDED_COMMANDS = {"image": "dsh-sandbox"}

#: Below this many columns click wraps the help more narrowly than the text here.
MIN_COLUMNS = 80

GROUP_HELP = """\
Usage: dsh-sandbox [OPTIONS] COMMAND [ARGS]...

  Run commands under a sandbox policy (read-only, workspace-write, danger-
  full-access).

Options:
  --version   Show the version and exit.
  -h, --help  Show this message and exit.

Commands:
  bench        Measure what each runner costs against a bare spawn.
  completion   Print the shell completion script (bash, zsh, fish).
  config       Show the effective configuration and where each value came
               from.
  conformance  Prove each runner holds the modes on this machine.
  hook         Run a Claude Code or Codex hooks configuration for one event,
               in the sandbox.
  image        Build the local Docker image the docker runner uses.
  mcp          Serve the sandboxed tools to an MCP client (stdio).
  profile      List, show, validate and explain profiles.
  run          Run a command under a sandbox policy.
  runners      List runners: available or not, and what they enforce.
  shell        Open an interactive bash in the workspace, in the sandbox.
  tool         Model-facing tools: print specs, make one tool call.
"""


def columns() -> int:
    """The terminal width click formats for (``shutil.get_terminal_size``'s
    rule, without importing shutil): ``COLUMNS`` when a positive number, else
    standard output's terminal, else 80."""
    try:
        width = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        width = 0
    if width <= 0:
        try:
            width = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            width = 0
        width = width or 80
    return width


def group_help() -> str | None:
    """The group's help as click would print it, or ``None`` when that needs click."""
    if columns() < MIN_COLUMNS:
        return None
    from dsh.sandbox.entry_point_files import scan

    added: dict[str, str] = {}
    for name, _target, dist in scan(COMMAND_GROUP, sys.path):
        added.setdefault(name, dist)  # the first on the path wins, as for modules
    return GROUP_HELP if added == OWN_ADDED_COMMANDS else None
