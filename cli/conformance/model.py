"""Vocabulary of the conformance suite: scenarios, their environment and outcomes.

A scenario is data: an id, a purpose, an optional setup, the exact argv, the
expected outcome per mode, and a host-side check that runs after the command
and decides whether the mode held.  The harness (``harness.py``) runs the
catalog (``catalog.py``) per runner and mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dsh.sandbox.capability import by_name

Expect = Literal["ok", "blocked"]
Outcome = Literal["pass", "fail", "not-enforced", "unavailable"]
MODES: tuple[str, ...] = ("read-only", "workspace-write")


@dataclass
class HostEnv:
    """What the host side of a run provides to scenarios (built by the harness)."""

    base: Path  # private directory of this runner x mode
    root: Path  # the workspace root
    ws: Path  # this scenario's directory inside the workspace
    outside: Path  # a host directory outside every writable root
    nonce: str  # unique per scenario run: marks files and processes
    ports: Mapping[str, int] = field(default_factory=dict)  # tcp, tcp6, udp, dns
    abstract: str = ""  # abstract unix socket name (without the NUL)
    unix_path: str = ""  # pathname unix socket outside the workspace
    victim_pid: int = 0  # a host process outside the sandbox
    secrets: Mapping[str, str] = field(default_factory=dict)  # env planted on the host
    hits: Callable[[str], int] = lambda name: 0  # listener hit counters since reset
    suid_helper: str | None = None  # root-owned setuid `id`, when provided
    is_root: bool = False
    supervisor_pid: int = 0  # the process that runs the harness and supervises the command
    listeners: Any = None  # the cell's ``Listeners``: setups open more sockets through it
    # The cell's runner, its options and the degradations it accepts: for a
    # host action that starts runs of its own on the same runner.
    runner: str = ""
    runner_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    accepted: tuple[str, ...] = ()
    # Values a setup adds for the argv (``{name}``) and the checks (e.g. a fresh victim's pid).
    extra: dict[str, Any] = field(default_factory=dict)
    cleanups: list[Callable[[], object]] = field(default_factory=list)  # run after the check

    def fmt(self, text: str) -> str:
        return text.format(
            ws=self.ws, root=self.root, outside=self.outside, nonce=self.nonce,
            tcp=self.ports.get("tcp", 9), tcp6=self.ports.get("tcp6", 9),
            udp=self.ports.get("udp", 9), dns=self.ports.get("dns", 9),
            abstract=self.abstract, unix_path=self.unix_path, victim=self.victim_pid,
            suid=self.suid_helper or "/nonexistent", nonce_short=self.nonce[:8],
            supervisor=self.supervisor_pid, **self.extra,
        )


class Unavailable(Exception):
    """Raised by a setup when this host cannot stage the scenario (reported "unavailable")."""


# What a command prints once it is ready for the host's mid-run action.
READY_MARKER = b"DSH-READY"
# What the host writes to the command's stdin once its mid-run action is done,
# and what the command prints once it has read it.
GO_LINE = b"go\n"
GO_MARKER = b"DSH-GO"


@dataclass(frozen=True)
class RunOutput:
    """What the command produced, as the executor reported it."""

    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_text: str
    stdout_total: int
    stdout_omitted: int
    spill_path: str | None
    denied: bool
    elapsed_s: float
    trusted_changed: tuple[str, ...] = ()  # files a later host action trusts, written by the run
    went: bool = False  # the host's mid-run action ran (the command printed the ready marker)


# A check returns None when the expectation holds, else what went wrong.
Check = Callable[[HostEnv, RunOutput], str | None]
Setup = Callable[[HostEnv], None]


@dataclass(frozen=True)
class Scenario:
    id: str
    family: str
    purpose: str
    argv: tuple[str | bytes, ...]  # exact argv; str items are formatted with HostEnv.fmt
    expect: Mapping[str, Expect]  # per mode
    check_ok: Check | None = None  # host check when the mode expects "ok"
    check_blocked: Check | None = None  # host check when the mode expects "blocked"
    setup: Setup | None = None
    covers: tuple[str, ...] = ()  # capabilities a runner may declare partial
    requires: tuple[str, ...] = ()  # programs that must exist inside the sandbox
    timeout_ms: int = 20_000
    env: Mapping[str, str] = field(default_factory=dict)  # caller env (trusted)
    # The hostile host's action while the command runs: once the command prints
    # READY_MARKER, the host runs this, then writes GO_LINE to the command's
    # stdin and closes it; the command waits for that (bounded), prints
    # GO_MARKER and attacks what the host just made.  Its stdin, not a file in
    # the workspace: a runner that works on a copy of the workspace (E2B)
    # would never show the file.  No GO_MARKER: the run fails, since a
    # verdict on an object the command never waited for is about nothing.
    during: Setup | None = None
    # Judged from what the command saw, not from host state (opening a tunable,
    # creating a socket): meaningless where the command runs on another kernel.
    judged_inside: bool = False
    # Run on a pty allocated inside the sandbox (the terminal relay), as a
    # terminal session or ``run -t`` does: stdout is then the terminal's output.
    tty: bool = False
    # Run with the network limited to an allowlist (a session of its own per
    # cell, see ``catalog_network``), not with the cell's network off.
    allowlist: bool = False

    def __post_init__(self) -> None:
        # A misspelt capability would never match what a runner declares
        # partial, and the scenario would fail instead of reading not-enforced.
        for name in self.covers:
            by_name(name)


@dataclass(frozen=True)
class ScenarioResult:
    scenario: str
    runner: str
    mode: str
    outcome: Outcome
    detail: str = ""
    elapsed_s: float = 0.0
