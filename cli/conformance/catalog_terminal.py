"""Terminal variants: escape scenarios run on a pty inside the sandbox, and what a pty adds.

A terminal session (``ctx.terminals``, the terminal tools, ``run -t``) starts its
program through the terminal relay on a pty of the sandbox's own (or through the
runner's own PTY API, where it has one).  The PTY
variants run existing escape scenarios that way (same argv, same checks), so a
pty opens nothing a pipe does not; the ``pty-`` scenarios attack the pty itself:
typing into it (TIOCSTI, TIOCLINUX), and processes that try to outlive the
session.
"""

from __future__ import annotations

import dataclasses

from dsh.cli.conformance.catalog_host import LIBC, py
from dsh.cli.conformance.checks import no_process_left
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
PY = ("python3",)

#: Existing scenarios that get a PTY variant (``<id>-pty``): files, processes, the
#: user's terminal, credentials and capabilities.
VARIANTS = (
    "fs-write-outside", "fs-write-etc", "fs-proc-self-root", "proc-setsid-escape", "proc-environ-outside",
    "term-read", "term-write-inject", "kern-capabilities", "pos-workspace-write", "pos-exit-code",
)


def _own_pty_refused(name: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        text = out.stdout.decode("utf-8", "replace")
        if f"{name} refused" in text:
            return None
        return f"{name} on the session's own pty was not refused: {text[-200:]!r}"

    return check


def _ioctl(name: str, request: int, arg: str) -> tuple[str, ...]:
    return py(LIBC, "import fcntl, sys\n"
                    f"try:\n    fcntl.ioctl(0, {request}, {arg})\n    print('{name} ALLOWED')\n"
                    f"except OSError as e:\n    print('{name} refused', e.errno)\n")


def pty_variants(scenarios: tuple[Scenario, ...]) -> tuple[Scenario, ...]:
    """The ``VARIANTS`` of ``scenarios`` run on a pty: the catalog passes every
    family it put together, so this module never imports the catalog back."""
    return tuple(dataclasses.replace(s, id=f"{s.id}-pty", purpose=f"{s.purpose} (on a pty)", tty=True)
                 for s in scenarios if s.id in VARIANTS)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("pty-own-tiocsti", "terminal", "type into the session's own pty (TIOCSTI)",
             _ioctl("TIOCSTI", 0x5412, "b'x'"), BLOCKED, check_blocked=_own_pty_refused("TIOCSTI"),
             covers=("terminal",), requires=PY, judged_inside=True, tty=True),
    Scenario("pty-own-tioclinux", "terminal", "paste or select on the session's own pty (TIOCLINUX)",
             _ioctl("TIOCLINUX", 0x541C, "bytes([2]) * 8"), BLOCKED,
             check_blocked=_own_pty_refused("TIOCLINUX"),
             covers=("terminal",), requires=PY, judged_inside=True, tty=True),
    Scenario("pty-job-outlives", "process", "a job-control group and a setsid daemon outlive the session",
             ("bash", "-ic", "(exec -a dshconf-{nonce} sleep 300) & "
              "setsid bash -c 'exec -a dshconf-{nonce} sleep 300' & disown -a; echo started"),
             BLOCKED, check_blocked=no_process_left, tty=True),
)
