"""The model-facing ``bash`` tool (consumer of ``ctx.require(ShellExecutor)`` with a bash executor)."""

from __future__ import annotations

from dsh.tools.shell_tool import BASH, ShellTool

BASH_TOOL = ShellTool(BASH)
