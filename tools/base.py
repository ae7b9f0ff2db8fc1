"""What every model-facing tool is: a spec for a context, and a call that
always ends in a ``ToolResult`` (text the model reads), never a traceback."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from dsh.sandbox.context import Context
from dsh.tools.spec import ToolSpec


@dataclass(frozen=True)
class ToolResult:
    """The model-visible outcome of one tool call.

    ``is_error`` marks calls that did not do what was asked (bad arguments,
    rejected escalation, unknown job, sandbox unavailable); a command that ran
    and exited non-zero is not an error of the tool.
    """

    content: str
    is_error: bool = False
    job_id: str | None = None

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(message, is_error=True)


class Tool(abc.ABC):
    name: str

    @abc.abstractmethod
    def available(self, ctx: Context) -> bool:
        """Whether the context has what this tool consumes."""

    @abc.abstractmethod
    def spec(self, ctx: Context) -> ToolSpec:
        """The spec as advertised in ``ctx`` (it may depend on the mounted executor)."""

    @abc.abstractmethod
    def run(self, ctx: Context, args: dict[str, Any], owner: str) -> ToolResult:
        """Run a call whose ``args`` already passed the spec's schema."""
