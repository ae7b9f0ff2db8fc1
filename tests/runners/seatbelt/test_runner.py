"""The Seatbelt runner: unavailable off macOS; real attack tests on macOS.

On a Mac with ``/usr/bin/sandbox-exec`` the attacks run for real and check the
host afterwards; elsewhere they skip with the runner's SANDBOX_UNAVAILABLE
reason (``require_runner``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from dsh.runners.seatbelt import SeatbeltRunner
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import LocalLaunch

from tests.support.require import require_runner


@pytest.mark.skipif(sys.platform == "darwin", reason="SANDBOX_UNAVAILABLE: checks the non-macOS behaviour")
def test_probe_off_macos_is_unavailable(tmp_path: Path) -> None:
    runner = SeatbeltRunner()
    probe = runner.probe()
    assert not probe.available
    assert probe.reason == f"sandbox-exec is macOS only (platform {sys.platform})"
    policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=tmp_path)
    with pytest.raises(SandboxUnavailable) as info:
        runner.prepare(["true"], policy, cwd=str(tmp_path), env={})
    assert info.value.code == "SANDBOX_UNAVAILABLE"
    assert "macOS only" in str(info.value)
    assert runner.explain(policy).cannot[0].startswith("seatbelt unavailable")


# -- real enforcement (macOS only) -------------------------------------------------------
@pytest.fixture
def runner() -> SeatbeltRunner:
    instance = SeatbeltRunner()
    require_runner("seatbelt", instance)
    return instance


def _policy(ws: Path, mode: SandboxMode = SandboxMode.WORKSPACE_WRITE) -> SandboxPolicy:
    ws = Path(os.path.realpath(ws))
    roots = (ws,) if mode is SandboxMode.WORKSPACE_WRITE else ()
    return SandboxPolicy(
        mode=mode,
        workspace=ws,
        writable_roots=roots,
        protected_paths=tuple(r / n for r in roots for n in (".git", ".dsh")),
    )


def _run(runner: SeatbeltRunner, script: str, policy: SandboxPolicy) -> subprocess.CompletedProcess[str]:
    launch = runner.prepare(["/bin/sh", "-c", script], policy, cwd=str(policy.workspace), env={})
    assert isinstance(launch, LocalLaunch)
    return subprocess.run(launch.argv, cwd=policy.workspace, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("original\n")
    (tmp_path / "outside").mkdir()
    return ws


@pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY])
def test_write_outside_and_protected_paths(runner: SeatbeltRunner, ws: Path, mode: SandboxMode) -> None:
    outside = ws.parent / "outside"
    script = f"""
        echo x > {outside}/x && exit 10
        echo x > .git/config && exit 11
        mv .git g2 && exit 12
        mkdir -p sub/.git && exit 13
        mkdir .dsh && exit 14
        ln -s .git/config lnk; echo x > lnk && exit 15
        echo x > /dev/null || exit 16
        exit 0
    """
    result = _run(runner, script, _policy(ws, mode))
    assert result.returncode == 0, result.stderr
    assert (ws / ".git" / "config").read_text() == "original\n"
    assert os.listdir(outside) == []
    assert not (ws / ".dsh").exists() and not (ws / "sub" / ".git").exists()


def test_workspace_is_writable(runner: SeatbeltRunner, ws: Path) -> None:
    result = _run(runner, "echo ok > made.txt", _policy(ws))
    assert result.returncode == 0, result.stderr
    assert (ws / "made.txt").read_text() == "ok\n"


def test_network_off(runner: SeatbeltRunner, ws: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    try:
        port = listener.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10)"
        result = _run(runner, f'{sys.executable} -c "{code}" && exit 10; exit 0', _policy(ws))
        assert result.returncode == 0, result.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
