"""bash-sandbox through the E2B runner (debug mode, envd double), end to end:
the executor drives the remote process like a local one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dsh.executors.seam import ShellExecRequest, ShellExecutor, ShellRunResult
from dsh.sandbox.errors import SandboxUnavailable

from tests.runners.e2b.conftest import Envd
from tests.runners.e2b.helpers import sandbox_path
from tests.support.sandboxed import sandbox_ctx


def run(ctx: Any, command: str, timeout_ms: int = 120_000) -> ShellRunResult:
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command=command, timeout_ms=timeout_ms))
    result: ShellRunResult = ctx.require(ShellExecutor).execute(spec).result()
    return result


def test_bash_sandbox_runs_in_the_e2b_sandbox(envd: Envd, workspace: Path) -> None:
    (workspace / "in.txt").write_text("from host\n")
    with sandbox_ctx(workspace, runner="e2b", mode="workspace-write",
                     accept_degraded=("e2b-debug",), options={"sandbox_url": envd.url}) as ctx:
        result = run(ctx, "cat in.txt; echo $USER; echo out > out.txt; echo err >&2; exit 3")
        assert result.exit_code == 3 and not result.timed_out
        assert result.stdout.text == "from host\ndsh\n"
        assert result.stderr.text == "err\n"
        assert result.sandbox is not None and result.sandbox.runner == "e2b"
        assert result.sandbox.enforcement.startswith("partial")
        assert (workspace / "out.txt").read_text() == "out\n"
        timed = run(ctx, "echo started; sleep 300", timeout_ms=2_000)
        assert timed.timed_out and timed.exit_code is None
        assert timed.stdout.text == "started\n"


def test_debug_mode_needs_the_degradation_accepted(envd: Envd, workspace: Path) -> None:
    """Debug mode is reported partial; without accepting it the run fails closed."""
    with sandbox_ctx(workspace, runner="e2b", mode="read-only",
                     options={"sandbox_url": envd.url}) as ctx, \
            pytest.raises(SandboxUnavailable, match="e2b"):
        run(ctx, "echo should-not-run > never.txt")
    assert not (sandbox_path(envd.root, workspace) / "never.txt").exists()
