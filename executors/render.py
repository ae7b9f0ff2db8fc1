"""The shell seam's shared exit-status convention (seed 002 "共享的退出状态约定").

The renderers of the ``bash`` and ``pwsh`` tools end a result with these markers;
``parse_exit_status`` splits a rendered string back into body and exit status,
so the two tools never drift.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass


def signal_name(signum: int) -> str:
    try:
        return _signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def signal_number(name: str) -> int | None:
    try:
        return int(_signal.Signals[name])
    except KeyError:
        m = re.fullmatch(r"SIG(\d+)", name)
        return int(m.group(1)) if m else None


def exit_marker(exit_code: int | None, signal: str | None) -> str | None:
    """``[killed by signal: X]`` or ``[exit code: N]``; None for exit 0."""
    if signal is not None:
        return f"[killed by signal: {signal}]"
    if exit_code is not None and exit_code != 0:
        return f"[exit code: {exit_code}]"
    return None


def timeout_marker(timeout_ms: int) -> str:
    return f"[timed out after {timeout_ms}ms]"


@dataclass(frozen=True)
class ExitStatusMarker:
    """What ``parse_exit_status`` recovers from a rendered string."""

    body: str
    exit_code: int | None
    signal: str | None
    timed_out_ms: int | None = None


_EXIT_RE = re.compile(r"\[exit code: (-?\d+)\]")
_SIGNAL_RE = re.compile(r"\[killed by signal: ([A-Z0-9_]+)\]")
_TIMEOUT_RE = re.compile(r"\[timed out after (\d+)ms\]")
_MARKER_LINE_RE = re.compile(r"\n?\[(exit code: -?\d+|killed by signal: [A-Z0-9_]+|timed out after \d+ms)\]")


def parse_exit_status(rendered: str) -> ExitStatusMarker:
    """Recover ``{exit_code}`` or ``{signal}`` from a rendered tool result.

    The markers are the last lines the renderer writes before the sandbox and
    truncation notices, so the *last* occurrence wins (output that happens to
    contain a marker-like line earlier cannot fool it).  No marker: exit 0.
    """
    exit_code: int | None = 0
    signal: str | None = None
    timed_out: int | None = None
    last_exit = list(_EXIT_RE.finditer(rendered))
    last_sig = list(_SIGNAL_RE.finditer(rendered))
    last_to = list(_TIMEOUT_RE.finditer(rendered))
    cut = len(rendered)
    candidates = []
    if last_exit:
        candidates.append(("exit", last_exit[-1]))
    if last_sig:
        candidates.append(("signal", last_sig[-1]))
    if candidates:
        kind, match = max(candidates, key=lambda c: c[1].start())
        if kind == "exit":
            exit_code, signal = int(match.group(1)), None
        else:
            exit_code, signal = None, match.group(1)
        cut = match.start()
    if last_to:
        timed_out = int(last_to[-1].group(1))
        cut = min(cut, last_to[-1].start())
    body = rendered[:cut]
    if body.endswith("\n"):
        body = body[:-1]
    return ExitStatusMarker(body=body, exit_code=exit_code, signal=signal, timed_out_ms=timed_out)
