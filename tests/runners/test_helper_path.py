"""Host-side helpers are never found through the caller's ``PATH``.

An earlier sandboxed run plants ``unshare``, ``bwrap``, ``prlimit``,
``setpriv``, ``timeout``, ``sh`` and ``bash`` in ``$WS/.venv/bin``; the next
run starts with that directory first on ``PATH`` (an activated project venv).
Each planted program appends its name and uid to a file outside every
writable root, then runs the real one: a line there is a helper that ran on
the host, unsandboxed.  Root and nobody.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host_tools import SYSTEM_PATH, refuse_writable_helpers, system_tool

from tests.support.cli import cli, trusted_config_dir
from tests.support.require import need_cgroup, require_runner
from tests.support.runners import nobody_python

HELPERS = ("unshare", "bwrap", "prlimit", "setpriv", "timeout", "sh", "bash", "true")
LIMITS = '[limits]\nwall_time_s = 600\nmax_file_size = 100000000\nmax_processes = 200\n'
NOBODY = 65534


def _plant(workspace: Path, marker: Path, runner: str, as_nobody: bool) -> Path:
    """Write the fake helpers into ``$WS/.venv/bin`` from inside a sandboxed run."""
    lines = []
    for name in HELPERS:
        real = system_tool(name)
        assert real is not None, name
        # Landlock's helpers run in its domain, where the marker outside is not
        # writable: the log in the workspace catches them (the command is
        # /bin/echo, so nothing else of the run writes it).
        log = workspace / "helper-log"
        body = (f'#!/bin/sh\necho "{name} uid=$(id -u)" >> {marker}\necho "{name}" >> {log}\n'
                f'exec {real} "$@"\n')
        lines.append(f"printf '%s' '{body}' > .venv/bin/{name} && chmod 755 .venv/bin/{name}")
    script = "mkdir -p .venv/bin && " + " && ".join(lines)
    done = _cli(workspace, as_nobody, "run", "--runner", "bwrap", "--mode", "workspace-write", "--", "sh", "-c",
                script)
    assert done.returncode == 0, done.stderr
    assert (workspace / ".venv/bin/unshare").is_file()
    return workspace / ".venv/bin"


def _env(workspace: Path, venv: Path) -> dict[str, str]:
    return {**_base_env(workspace), "PATH": f"{venv}:.:{os.environ.get('PATH', os.defpath)}",
            "VIRTUAL_ENV": str(venv.parent)}


def _base_env(workspace: Path) -> dict[str, str]:
    return {**os.environ, "HOME": str(workspace.parent), "XDG_CACHE_HOME": str(workspace.parent / "cache")}


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _cli(workspace: Path, as_nobody: bool, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[bytes]:
    env = env or _base_env(workspace)
    if not as_nobody:
        return cli(*args, cwd=workspace, env=env)
    python = nobody_python()
    assert python is not None
    return subprocess.run([python, "-P", "-m", "dsh.cli", *args], cwd=workspace, env=env, capture_output=True,
                          timeout=180, check=False, preexec_fn=_drop)


@pytest.fixture(params=["root", "nobody"])
def who(request: pytest.FixtureRequest) -> str:
    if request.param == "nobody":
        if os.geteuid() != 0:
            pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
        if nobody_python() is None:
            pytest.skip("SANDBOX_UNAVAILABLE: DSH_NOBODY_PYTHON is not set (an interpreter nobody can run)")
    elif os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: the root variant needs root")
    return str(request.param)


@pytest.fixture
def place(who: str) -> Iterator[tuple[Path, Path]]:
    """(workspace, marker outside every writable root), owned by ``who``."""
    base = Path("/var/tmp") / f"dsh-helper-path-{uuid.uuid4().hex[:8]}"
    (base / "ws").mkdir(parents=True)
    marker = trusted_config_dir() / f"helper-ran-{uuid.uuid4().hex[:8]}"
    marker.touch()
    marker.chmod(0o666)
    if who == "nobody":
        for path in (base, base / "ws"):
            os.chown(path, NOBODY, NOBODY)
    try:
        yield base / "ws", marker
    finally:
        subprocess.run(["rm", "-rf", str(base), str(marker)], check=False)


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
@pytest.mark.parametrize("limits", [False, True], ids=["plain", "limits"])
def test_helpers_planted_on_the_callers_path_never_run(
        runner: str, limits: bool, who: str, place: tuple[Path, Path]) -> None:
    require_runner(runner)
    require_runner("bwrap")  # the planting run
    if limits:
        need_cgroup("pids")
    workspace, marker = place
    nobody = who == "nobody"
    venv = _plant(workspace, marker, runner, nobody)
    profile = trusted_config_dir() / f"helper-path-{runner}-{limits}.toml"
    accept = ('accept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-process-list",'
              ' "landlock-limits", "landlock-process-escape"]\n' if runner == "landlock" else "")
    profile.write_text(f'extends = "workspace-write"\n{accept}{LIMITS if limits else ""}')
    accept_ro = ["--accept-degraded", "landlock-process-list", "--accept-degraded", "landlock-process-escape"]
    read_only = ["--mode", "read-only", *(accept_ro if runner == "landlock" else [])]
    for how in (["--profile", str(profile)], read_only):
        done = _cli(workspace, nobody, "run", "--runner", runner, *how, "--", "/bin/echo", "ran",
                    env=_env(workspace, venv))
        assert done.returncode == 0, done.stderr
        assert done.stdout == b"ran\n"
        assert marker.read_text() == "", f"a planted helper ran on the host ({how}): {marker.read_text()}"
        log = workspace / "helper-log"
        assert not log.exists(), f"a planted helper ran ({how}): {log.read_text()}"


def test_a_helper_that_resolves_into_a_writable_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "bin").mkdir(parents=True)
    planted = root / "bin" / "unshare"
    planted.write_text("#!/bin/sh\n")
    elsewhere = tmp_path / "sbin"
    elsewhere.mkdir()
    (elsewhere / "unshare").symlink_to(planted)
    for helper in (str(planted), str(elsewhere / "unshare")):
        with pytest.raises(SandboxUnavailable) as caught:
            refuse_writable_helpers([helper, "/bin/sh"], [root], runner="bwrap")
        assert caught.value.code == "SANDBOX_UNAVAILABLE"
        assert helper in str(caught.value) and str(root.resolve()) in str(caught.value)
    refuse_writable_helpers(["/bin/sh", None], [root, None], runner="bwrap")


def test_helpers_come_from_the_system_path_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "unshare").write_text("#!/bin/sh\n")
    (tmp_path / "unshare").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ.get('PATH', '')}")
    found = system_tool("unshare")
    assert found is not None and os.path.dirname(found) in SYSTEM_PATH.split(":")
    assert system_tool("relative/unshare") is None
