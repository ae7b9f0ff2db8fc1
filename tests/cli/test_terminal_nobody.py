"""Terminal sessions, ``run -t`` and stdin as an unprivileged user (nobody), on the real runners."""

from __future__ import annotations

import os
import pty
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_run_tty import Attached
from tests.support.runners import nobody_python
from tests.support.sandboxed import accept_for, need_runner

NOBODY = 65534
RUNNERS = ("landlock", "bwrap")


def _accept(runner: str) -> tuple[str, ...]:
    # Unprivileged, Landlock has no cgroup to hold what leaves the session: accepted by name.
    return (*accept_for(runner), "landlock-process-escape") if runner == "landlock" else ()


@pytest.fixture
def nobody_ws(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    if nobody_python() is None:
        pytest.skip("SANDBOX_UNAVAILABLE: DSH_NOBODY_PYTHON is not set (an interpreter nobody can run)")
    base = Path("/var/tmp") / f"dsh-term-nobody-{os.getpid()}-{tmp_path.name}"
    ws = base / "ws"
    ws.mkdir(parents=True)
    for path in (base, ws):
        os.chown(path, NOBODY, NOBODY)
    try:
        yield ws
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def _env(ws: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(ws.parent), "LANG": "C.UTF-8",
            "XDG_CACHE_HOME": str(ws.parent / "cache")}


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


class NobodyAttached(Attached):
    def __init__(self, workspace: Path, runner: str, *argv: str, extra: tuple[str, ...] = ()) -> None:
        need_runner(runner)
        accept = [f"--accept-degraded={n}" for n in _accept(runner)] + list(extra)
        python = nobody_python()
        assert python is not None
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            _as_nobody()
            os.chdir(workspace)
            os.execve(python, [python, "-P", "-m", "dsh.cli", "run", "--runner", runner, *accept,
                               "--workspace", str(workspace), "--", *argv], _env(workspace))
        self.resize(24, 80)
        self.seen = b""


@pytest.mark.parametrize("runner", RUNNERS)
def test_run_tty_as_nobody(nobody_ws: Path, runner: str) -> None:
    run = NobodyAttached(nobody_ws, runner, "python3", "-q")
    run.expect(b">>> ")
    run.type(b"import os; print(os.getuid(), os.ttyname(0))\r")
    run.expect(b"65534 /dev/pts/")
    run.type(b"import time; time.sleep(1000)\r")
    run.expect(b"time.sleep(1000)")
    run.type(b"\x03")
    run.expect(b"KeyboardInterrupt")
    run.type(b"raise SystemExit(3)\r")
    assert run.status() == 3


@pytest.mark.parametrize("runner", RUNNERS)
def test_stdin_and_persistent_bash_as_nobody(nobody_ws: Path, runner: str) -> None:
    need_runner(runner)
    python = nobody_python()
    assert python is not None
    accept = [f"--accept-degraded={n}" for n in _accept(runner)]
    piped = subprocess.run([python, "-P", "-m", "dsh.cli", "run", "--runner", runner, *accept, "--workspace",
                            str(nobody_ws), "--", "cat"], input=b"through\n", capture_output=True, cwd=nobody_ws,
                           env=_env(nobody_ws), timeout=300, check=False, preexec_fn=_as_nobody)
    assert (piped.returncode, piped.stdout) == (0, b"through\n"), piped.stderr
    (nobody_ws / "sub").mkdir()
    os.chown(nobody_ws / "sub", NOBODY, NOBODY)
    script = textwrap.dedent(f"""
        from dsh.sandbox.context import build_context
        from dsh.tools.toolbox import call_tool
        ctx = build_context([
            {{"id": "policy", "name": "sandbox-policy", "config": {{"mode": "workspace-write",
              "workspace": {str(nobody_ws)!r}, "accept_degraded": {list(_accept(runner))!r}}}}},
            {{"id": "sandbox", "name": "sandbox", "config": {{"runner": {runner!r}}}}},
            {{"id": "shell", "name": "bash-sandbox", "config": {{}}}},
            {{"id": "terminals", "name": "terminals", "config": {{}}}},
            {{"id": "terminal-bash", "name": "terminal-bash", "config": {{}}}},
            {{"id": "persistent-shells", "name": "persistent-shells", "config": {{}}}},
        ])
        with ctx:
            call_tool(ctx, "bash", {{"command": "cd sub && export KEPT=yes", "description": "d"}}, owner="a")
            print(call_tool(ctx, "bash", {{"command": 'echo "$KEPT $(basename $PWD) $(id -u)"',
                                          "description": "d"}}, owner="a").content)
    """)
    done = subprocess.run([python, "-P", "-c", script], capture_output=True, cwd=nobody_ws, env=_env(nobody_ws),
                          timeout=300, check=False, preexec_fn=_as_nobody)
    assert done.stdout.decode().strip() == "yes sub 65534", (done.stdout, done.stderr[-2000:])


@pytest.mark.parametrize("runner", RUNNERS)
def test_sigkill_of_the_host_process_leaves_nothing_as_nobody(nobody_ws: Path, runner: str) -> None:
    """Unprivileged there is no cgroup to hold the session: the relay itself must end it."""
    import secrets

    from tests.executors.test_terminal_sessions import _HOLDER
    from tests.support.processes import describe, pids_with
    from tests.support.wait import wait_until

    need_runner(runner)
    python = nobody_python()
    assert python is not None
    mark = f"dsh-term-{secrets.token_hex(4)}"
    holder = subprocess.Popen([python, "-P", "-c", _HOLDER, str(nobody_ws), runner, ",".join(_accept(runner)), mark],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=nobody_ws, env=_env(nobody_ws),
                              preexec_fn=_as_nobody)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        wait_until(lambda: len([p for p in pids_with(mark) if p != holder.pid]) == 2, "both sleeps")
        holder.kill()
        holder.wait()
        wait_until(lambda: not pids_with(mark), lambda: "the session's processes to die: " + describe(pids_with(mark)))
    finally:
        holder.kill()
        holder.wait()


def test_run_tty_under_limits_as_nobody(nobody_ws: Path) -> None:
    """Unprivileged limits put prlimit in front of the relay, which then gets its
    environment through a hop: the host's pty pair must still reach it."""
    profile = nobody_ws.parent / "limited.toml"
    profile.write_text('extends = "workspace-write"\n[limits]\nmax_processes = 512\nmax_memory = "2GiB"\n')
    os.chmod(profile, 0o644)
    run = NobodyAttached(nobody_ws, "landlock", "sh", "-c", "tty",
                         extra=("--profile", str(profile), "--accept-degraded=landlock-limits"))
    code = run.status()  # everything it printed is in run.seen then
    assert run.seen.strip().startswith(b"/dev/pts/") and code == 0, (code, run.seen.decode(errors="replace"))
