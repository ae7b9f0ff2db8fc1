"""E2B runner commands through the real SDK against the envd double: argv, exits,
output, stdin, environment, kill, timeouts and background commands."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import dsh.runners.e2b.process as process_module
import pytest
from dsh.runners.e2b import E2BRunner
from dsh.runners.e2b.command import exit_status, process_argv, shell_script
from dsh.sandbox.errors import SandboxUnavailable, UsageError
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import EXEC_CHECK_SH, ExitStatus

from tests.runners.e2b.conftest import Envd
from tests.runners.e2b.helpers import policy, run, sandbox_path, start
from tests.support.wait import PATIENCE_S, wait_until


def machine_running(envd: Envd, pid: int) -> bool:
    """Whether a process of the double's machine (pid as the sandbox sees it) runs."""
    from tests.runners.e2b.envd_server import envd_double

    return envd_double(envd.url).machine.running(pid)


TRICKY = ["a b", "it's", '"q"', "$HOME", "`id`", "x\ny", "*", "", "-n", "tab\there"]


def test_the_runner_itself_refuses_a_degradation_nobody_accepted(runner: E2BRunner, workspace: Path) -> None:
    """Called directly, not through the host, the runner still gates: debug mode
    verifies no sandbox boundary, so it runs only when accepted by name."""
    with pytest.raises(SandboxUnavailable, match="--accept-degraded e2b-debug"):
        runner.prepare(["touch", str(workspace / "ran")], policy("workspace-write", workspace, accept_degraded=()),
                       cwd=str(workspace), env={})
    assert not (workspace / "ran").exists()  # no launch was even made


def test_exact_argv_arrives_unchanged(runner: E2BRunner, workspace: Path) -> None:
    argv: list[str | bytes] = ["printf", "%s\\0", *TRICKY, b"\xff\xfe-not-utf8", "caf\u00e9"]
    ran = run(runner, argv, policy("workspace-write", workspace))
    assert ran.status == ExitStatus(0)
    expected = b"".join(
        (a if isinstance(a, bytes) else a.encode()) + b"\0" for a in argv[2:])
    assert ran.stdout == expected
    assert ran.stderr == b""


def test_nonzero_exit_keeps_code_and_both_streams(runner: E2BRunner, workspace: Path) -> None:
    script = "echo out; echo err >&2; printf '\\377raw'; exit 42"
    ran = run(runner, ["sh", "-c", script], policy("read-only", workspace))
    assert ran.status == ExitStatus(42)
    assert ran.stdout == b"out\n\xffraw"
    assert ran.stderr == b"err\n"


def test_not_a_login_shell(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    pol = policy("workspace-write", workspace)
    assert run(runner, ["true"], pol).status == ExitStatus(0)  # sets the sandbox up
    home = envd.root / "home/dsh"
    for name in (".profile", ".bash_profile"):
        (home / name).write_text("echo PROFILE-SOURCED\n")
    ran = run(runner, ["echo", "plain"], pol)
    assert ran.stdout == b"plain\n"
    # Control: the SDK's own commands.run wraps in `bash -l -c`, which sources it.
    session = runner._session
    assert session is not None
    sdk = session.sandbox.commands.run("echo sdk", user="dsh", cwd="/")
    assert "PROFILE-SOURCED" in sdk.stdout


def test_environment_drops_host_facts(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    env = {"FOO": "bar baz", "PATH": "/host/only", "HOME": "/root", "BASH_ENV": "/x", "DSH_X": "1",
           "BAD": "\udcff"}  # not UTF-8: dropped, not a crash
    ran = run(runner, ["sh", "-c", 'printf "%s|" "$FOO" "$PATH" "$HOME" "$USER" "${BASH_ENV-unset}" '
                       '"$DSH_X" "${BAD-unset}"'], policy("workspace-write", workspace), env=env)
    fields = ran.stdout.decode().split("|")
    assert fields[0] == "bar baz" and fields[5] == "1" and fields[6] == "unset"
    assert "/host/only" not in fields[1]
    assert fields[2] == "/home/dsh"  # the sandbox user's home, in the sandbox
    assert fields[3] == "dsh" and fields[4] == "unset"


def test_the_sandbox_home_variables_stay_on_the_host(runner: E2BRunner, workspace: Path) -> None:
    # What a constrained executor sets for the host runners' sandbox HOME names
    # host directories: the remote user's own home serves, and it is writable.
    env = {"HOME": "/root/.cache/dsh-sandbox/home/ws-1", "XDG_CACHE_HOME": "/root/.cache/dsh-sandbox/home/ws-1/.cache",
           "XDG_CONFIG_HOME": "/root/.config", "GIT_CONFIG_GLOBAL": "/root/.gitconfig", "RUSTUP_HOME": "/root/.rustup"}
    script = ('printf "%s|" "$HOME" "${XDG_CACHE_HOME-unset}" "${XDG_CONFIG_HOME-unset}" '
              '"${GIT_CONFIG_GLOBAL-unset}" "${RUSTUP_HOME-unset}"; touch "$HOME/.node-spawn-wrap-1" && echo wrote')
    ran = run(runner, ["sh", "-c", script], policy("workspace-write", workspace), env=env)
    assert ran.stdout == b"/home/dsh|unset|unset|unset|unset|wrote\n", ran.stderr


def test_a_memory_limit_is_a_declared_limitation(runner: E2BRunner, workspace: Path) -> None:
    assert runner.limitations(policy("workspace-write", workspace)) == {}
    limited = policy("workspace-write", workspace, limits=ResourceLimits(max_memory_bytes=1 << 29))
    assert "Node/V8" in runner.limitations(limited)["address-space"]
    assert any("RLIMIT_AS" in line for line in runner.explain(limited).cannot)


def test_modes_run_as_their_users(runner: E2BRunner, workspace: Path) -> None:
    users = {mode: run(runner, ["sh", "-c", "printf %s \"$USER\""], policy(mode, workspace,
                       network=mode == "danger-full-access")).stdout
             for mode in ("read-only", "workspace-write")}
    assert users == {"read-only": b"dsh-ro", "workspace-write": b"dsh"}


def test_danger_full_access_runs_as_root(envd: Envd, workspace: Path) -> None:
    runner = E2BRunner({"sandbox_url": envd.url})
    try:
        ran = run(runner, ["sh", "-c", 'printf %s "$USER"'],
                  policy("danger-full-access", workspace, network=True))
        assert ran.stdout == b"root"
    finally:
        runner.close()


def test_stdin_bytes_arrive_exactly(runner: E2BRunner, workspace: Path) -> None:
    data = bytes(range(256)) * 1024 + b"\nend"  # 256 KiB: several SendInput calls
    ran = run(runner, ["cat"], policy("read-only", workspace), stdin=data)
    assert ran.status == ExitStatus(0)
    assert ran.stdout == data


def test_no_stdin_reads_eof(runner: E2BRunner, workspace: Path) -> None:
    ran = run(runner, ["sh", "-c", "cat; echo done"], policy("read-only", workspace))
    assert ran.stdout == b"done\n"


def test_kill_kills_the_whole_tree(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    pol = policy("workspace-write", workspace)
    # The grandchild writes its pid (in the sandbox) where the test can read it.
    pidfile = "/tmp/grandchild.pid"
    script = f"sh -c 'echo $$ > {pidfile}; exec sleep 300' & echo started; wait"
    proc, out = start(runner, ["sh", "-c", script], pol)
    seen = envd.root / pidfile.lstrip("/")
    wait_until(lambda: out.stdout_so_far() == b"started\n" and seen.exists()
             and seen.read_text().strip(), "the command to start")
    grandchild = int(seen.read_text())
    assert machine_running(envd, grandchild)
    assert proc.wait(0) is None
    proc.kill(signal.SIGKILL)
    status = proc.wait(PATIENCE_S)
    assert status == ExitStatus(None, signal.SIGKILL)
    wait_until(lambda: not machine_running(envd, grandchild), "the grandchild to die")


def test_death_by_signal_is_reported_as_the_signal(runner: E2BRunner, workspace: Path) -> None:
    ran = run(runner, ["sh", "-c", "kill -KILL $$"], policy("read-only", workspace))
    assert ran.status == ExitStatus(None, signal.SIGKILL)  # not 137 from a wrapping shell


def test_nothing_outlives_the_command(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    """A setsid daemon leaves the process group; the run token still finds it."""
    pidfile = "/tmp/daemon.pid"
    script = (f"setsid sh -c 'echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
              f"exec sleep 300' & while [ ! -s {pidfile} ]; do sleep 0.05; done")
    ran = run(runner, ["sh", "-c", script], policy("workspace-write", workspace))
    assert ran.status == ExitStatus(0)
    daemon = int((envd.root / pidfile.lstrip("/")).read_text())
    wait_until(lambda: not machine_running(envd, daemon), "the setsid daemon to die")


def test_background_start_read_then_terminate(runner: E2BRunner, workspace: Path) -> None:
    proc, out = start(runner, ["sh", "-c", "echo ready; sleep 300; echo never"],
                      policy("read-only", workspace))
    wait_until(lambda: out.stdout_so_far() == b"ready\n", "the first line")
    assert proc.wait(0.2) is None
    proc.kill(signal.SIGTERM)
    status = proc.wait(PATIENCE_S)
    assert status == ExitStatus(None, signal.SIGTERM)
    assert out.finish().stdout == b"ready\n"
    proc.kill(signal.SIGKILL)  # after the end: a no-op, not an error


def test_stream_deadline_kills_the_command(runner: E2BRunner, envd: Envd, workspace: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The backstop deadline of envd's stream: whichever shape it takes (envd kills
    -> exit -1 "signal: killed", or the SDK's TimeoutException), the command ends
    killed and its tree is gone."""
    pol = policy("workspace-write", workspace)
    assert run(runner, ["true"], pol).status == ExitStatus(0)
    # Where start() reads it (it imports the name): patching the session module did nothing,
    # and the test waited out the real 60 s margin.
    monkeypatch.setattr(process_module, "BACKSTOP_MARGIN_S", 1.0)
    pidfile = envd.root / "tmp/child.pid"
    script = "sh -c 'echo $$ > /tmp/child.pid; exec sleep 300' & wait"
    proc, _out = start(runner, ["sh", "-c", script], pol, deadline_s=0.5)
    status = proc.wait(PATIENCE_S)
    assert status == ExitStatus(None, signal.SIGKILL)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), "the child pid")
    wait_until(lambda: not machine_running(envd, int(pidfile.read_text())), "the child to die")


def test_missing_cwd_is_reported(runner: E2BRunner, workspace: Path, tmp_path: Path) -> None:
    from dsh.sandbox.errors import WorkdirError

    with pytest.raises(WorkdirError, match="does not exist in the sandbox"):
        run(runner, ["true"], policy("read-only", workspace), cwd=tmp_path / "nowhere")


def test_limits_go_through_prlimit(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    limits = ResourceLimits(max_file_size_bytes=4096)
    ran = run(runner, ["sh", "-c", "head -c 10000 /dev/zero > big; echo rc=$?"],
              policy("workspace-write", workspace, limits=limits))
    assert (sandbox_path(envd.root, workspace) / "big").stat().st_size == 4096
    assert b"rc=0" not in ran.stdout


# -- pure mapping -------------------------------------------------------------------
def test_shell_script_is_exec_shlex_join_for_text() -> None:
    argv = ["echo", *TRICKY]
    assert shell_script(argv) == "set -- " + shlex.join(argv) + "; " + EXEC_CHECK_SH + 'exec "$@"'
    with pytest.raises(UsageError):
        shell_script([])
    with pytest.raises(UsageError, match="NUL"):
        shell_script(["echo", "a\0b"])


def test_process_argv_is_setsid_sh_c() -> None:
    assert process_argv("x", ResourceLimits()) == ["setsid", "-w", "/bin/sh", "-c", "x"]
    limited = process_argv("x", ResourceLimits(max_processes=5, max_memory_bytes=1 << 30))
    assert limited[:5] == ["setsid", "-w", "prlimit", "--nproc=5", f"--as={1 << 30}"]


@pytest.mark.parametrize(("code", "status", "error", "expected"), [
    (0, "exit status 0", None, ExitStatus(0)),
    (3, "exit status 3", "exit status 3", ExitStatus(3)),
    (-1, "signal: killed", "signal: killed", ExitStatus(None, signal.SIGKILL)),
    (-1, "signal: terminated", "signal: terminated", ExitStatus(None, signal.SIGTERM)),
    (-1, "signal: user defined signal 1", None, ExitStatus(None, signal.SIGUSR1)),
    (-1, None, None, ExitStatus(None, signal.SIGKILL)),
])
def test_end_event_mapping(code: int, status: str | None, error: str | None,
                           expected: ExitStatus) -> None:
    assert exit_status(code, status, error) == expected


def test_wait_timeout_returns_none(runner: E2BRunner, workspace: Path) -> None:
    proc, _out = start(runner, ["sleep", "300"], policy("read-only", workspace))
    assert proc.wait(0.3) is None
    proc.kill(signal.SIGKILL)
    assert proc.wait(PATIENCE_S) == ExitStatus(None, signal.SIGKILL)


class _Interrupted(BaseException):
    """Stands in for the CLI's signal exception, raised mid-start."""


def test_start_interrupted_after_launch_is_killed_at_close(
        envd: Envd, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """envd launched the command but the handle was never made (a signal to
    the CLI landed in between): closing the runner still kills it."""
    import dsh.runners.e2b.process as process_module

    launched: list[int] = []

    def interrupted(self: object, session: object, pid: int, *args: object, **kw: object) -> None:
        launched.append(pid)
        raise _Interrupted

    runner = E2BRunner({"sandbox_url": envd.url})
    try:
        assert run(runner, ["true"], policy("read-only", workspace)).status == ExitStatus(0)
        monkeypatch.setattr(process_module.E2BProcess, "__init__", interrupted)
        with pytest.raises(_Interrupted):
            start(runner, ["sleep", "3600"], policy("read-only", workspace))
        assert launched and machine_running(envd, launched[0])
    finally:
        monkeypatch.undo()
        runner.close()
    # The kill is sent at close; the process is gone once the machine's kernel
    # has delivered it, which a loaded host may take a moment to do.
    wait_until(lambda: not machine_running(envd, launched[0]), "the interrupted command to die at close",
               timeout=10)
