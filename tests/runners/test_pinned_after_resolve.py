"""After the policy is resolved, its workspace name is exchanged with another
real directory (no symlink anywhere, so no name check can tell): every runner
must still bind, grant and write the directory that was resolved and checked,
never the one now at its name, or refuse to start (a runner whose tool mounts
by name sees the exchange).  Deterministic, unlike ``test_pin_race``."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy_service import PolicyService
from dsh.sandbox.session import SessionSpec, build_session

from tests.support.require import require_runner

RENAME_EXCHANGE = 2
ACCEPT = {"landlock": ("landlock-protected-paths", "landlock-metadata", "landlock-process-escape",
                        "landlock-process-list")}


def exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@pytest.fixture
def base() -> Iterator[Path]:
    made = Path(tempfile.mkdtemp(prefix="dsh-pinned-", dir="/var/tmp")).resolve()
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker"])
def test_a_directory_exchanged_after_resolution_is_not_the_one_used(runner: str, base: Path) -> None:
    require_runner(runner)
    ws, decoy = base / "ws", base / "decoy"
    ws.mkdir()
    decoy.mkdir()
    (ws / "which").write_text("resolved\n")
    (decoy / "which").write_text("decoy\n")
    spec = SessionSpec(executor="bash-sandbox", workspace=str(ws), runner=runner,
                       accept_degraded=ACCEPT.get(runner, ()))
    with build_session(spec) as ctx:
        ctx.require(PolicyService).resolve()
        shell = ctx.require(ShellExecutor)
        request = shell.resolve(ShellExecRequest(command=f"echo written > {ws}/marker", timeout_ms=120_000))
        exchange(ws, decoy)  # the resolved directory is now at ``decoy``'s name, and the reverse
        try:
            result = shell.execute(request).result()
        except SandboxUnavailable as exc:
            # Docker's daemon binds by name: it bound the other directory, and
            # the check of the bind against the pin refused it.  bwrap mounts
            # the pinned directory by the name it has now, onto whatever holds
            # the workspace's name: a bind on a decoy, which the host-side
            # check of its mounts refuses before the command starts.
            assert runner in ("docker", "bwrap"), exc
            assert str(ws) in str(exc)
            if runner == "bwrap":
                assert "another directory on the host" in str(exc) and "nothing ran" in str(exc)
            result = None
    # ``decoy`` now names the directory that was resolved; ``ws`` the other one.
    assert (decoy / "which").read_text() == "resolved\n"
    assert not (ws / "marker").exists(), "the run wrote the directory now at the workspace's name"
    if runner == "bwrap":
        assert result is None, "bwrap ran with its workspace bound on the directory now at the workspace's name"
        assert not (decoy / "marker").exists()
