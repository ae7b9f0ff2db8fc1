"""A long-lived process that opens and closes sessions keeps no descriptor per session.

An MCP server, or this test suite, builds a session per client or test.  Each
bwrap session kept its compiled syscall filter's memfd open after it closed:
under a login session's limit of 1,024 descriptors, the suite ran out of them
two thirds of the way through.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.executors import run
from tests.support.sandboxed import accept_for, need_runner, sandbox_ctx

SESSIONS = 6


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor"])
def test_closed_sessions_leave_no_descriptor_behind(runner: str, trusted_dir: Path) -> None:
    need_runner(runner)
    counts = []
    for _ in range(SESSIONS):
        with sandbox_ctx(trusted_dir, runner=runner, accept_degraded=accept_for(runner)) as ctx:
            result = run(ctx, "true")
            assert result.exit_code == 0, result.stderr.text
        counts.append(_open_fds())
    # The first session may open what the process keeps (a compiled filter);
    # every later one must give back what it took.  One descriptor of slack: a
    # thread of the last session may still be closing one (a leak of one per
    # session would show four).
    assert counts[-1] <= counts[1] + 1, counts
