"""The model-facing ``pwsh`` tool: the ``bash`` tool's mirror for PowerShell executors."""

from __future__ import annotations

from dsh.tools.shell_tool import PWSH, ShellTool

PWSH_TOOL = ShellTool(PWSH)
