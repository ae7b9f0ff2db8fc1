"""The gVisor runner against the real runsc: boundary, file rules, argv, statuses, signals, limits, lifecycle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dsh.runners.gvisor import GvisorRunner
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import LocalLaunch

from tests.runners.gvisor.helpers import ENV, finish, policy, run, sh, start
from tests.support.require import require_runner
from tests.support.wait import PATIENCE_S, wait_until


def test_missing_runsc_is_unavailable_with_an_install_hint(ws: Path) -> None:
    missing = GvisorRunner({"runsc": "/nonexistent/dsh/runsc"})
    probe = missing.probe()
    assert not probe.available and probe.reason is not None and "apt-get install runsc" in probe.reason
    with pytest.raises(SandboxUnavailable, match="apt-get install runsc"):
        missing.prepare(["true"], policy(ws), cwd=str(ws), env=ENV)


def test_danger_full_access_is_not_wrapped(runner: GvisorRunner, ws: Path) -> None:
    launch = runner.prepare(["true"], policy(ws, SandboxMode.DANGER_FULL_ACCESS), cwd=str(ws), env=ENV)
    assert isinstance(launch, LocalLaunch) and launch.argv == ("true",)


def test_commands_run_on_gvisors_kernel_without_capabilities(runner: GvisorRunner, ws: Path) -> None:
    ran = sh(runner, "cat /proc/version; grep CapEff /proc/self/status", policy(ws))
    assert ran.status.exit_code == 0, ran.text
    host = Path("/proc/version").read_text()
    assert host.strip() not in ran.text  # another kernel answers
    assert "CapEff:\t0000000000000000" in ran.text


def test_argv_arrives_exactly(runner: GvisorRunner, ws: Path) -> None:
    odd = ["a b", "it's", '"q"', "$HOME", "new\nline", "", os.fsdecode(b"\xff\xfe-bytes")]
    ran = run(runner, ["printf", "%s|", *odd], policy(ws))
    assert ran.status.exit_code == 0, ran.text
    assert ran.out == b"|".join(os.fsencode(a) for a in odd) + b"|"


def test_exit_statuses_as_a_shell_reports_them(runner: GvisorRunner, ws: Path) -> None:
    pol = policy(ws)
    assert sh(runner, "exit 7", pol).status.exit_code == 7
    missing = run(runner, ["dsh-no-such-program"], pol)
    assert missing.status.exit_code == 127 and b"command not found" in missing.err
    (ws / "plain").write_text("not executable\n")
    assert run(runner, [str(ws / "plain")], pol).status.exit_code == 126


def test_stdin_reaches_the_command(runner: GvisorRunner, ws: Path) -> None:
    ran = run(runner, ["cat"], policy(ws), stdin=b"fed\x00bytes")
    assert ran.out == b"fed\x00bytes"


def test_file_rules_hold_on_the_hosts_files(runner: GvisorRunner, ws: Path, tmp_path: Path) -> None:
    outside = Path(os.path.realpath(tmp_path)) / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep\n")
    secret = ws / "secret"
    secret.mkdir()
    (secret / "key").write_text("TOPSECRET\n")
    pol = policy(ws, hidden=(secret,))
    script = (f"echo ok > {ws}/new; echo x > {ws}/.git/config; mkdir {ws}/.dsh/x; echo x > {outside}/keep; "
              f"echo x > {outside}/new; cat {secret}/key; ls {secret}; echo done")
    ran = sh(runner, script, pol)
    assert b"done" in ran.out, ran.text
    assert (ws / "new").read_text() == "ok\n"
    assert (ws / ".git" / "config").read_text() == "original\n"
    assert (outside / "keep").read_text() == "keep\n" and not (outside / "new").exists()
    assert b"TOPSECRET" not in ran.out
    assert not (ws / ".dsh").exists() or not os.listdir(ws / ".dsh")


def test_read_only_mode_writes_nothing(runner: GvisorRunner, ws: Path) -> None:
    ran = sh(runner, f"echo x > {ws}/new; echo x > /tmp/dsh-gvisor-ro-$$; echo done", policy(ws, SandboxMode.READ_ONLY))
    assert b"done" in ran.out and not (ws / "new").exists()
    assert b"Read-only file system" in ran.err


def test_host_changes_between_commands_are_seen(runner: GvisorRunner, ws: Path) -> None:
    pol = policy(ws)
    (ws / "f").write_text("one\n")
    assert sh(runner, "cat f", pol).out == b"one\n"
    (ws / "f").write_text("two\n")
    assert sh(runner, "cat f", pol).out == b"two\n"


def test_a_replaced_git_dir_makes_a_new_sandbox(runner: GvisorRunner, ws: Path) -> None:
    """A bind holds the inode: after ``rm -rf .git; git init`` on the host the old
    bind would protect nothing, so the runner must not reuse that sandbox."""
    pol = policy(ws)
    assert sh(runner, "true", pol).status.exit_code == 0
    os.rename(ws / ".git", ws / "old-git")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("new\n")
    ran = sh(runner, "echo x > .git/config; echo done", pol)
    assert b"done" in ran.out
    assert (ws / ".git" / "config").read_text() == "new\n"


def _live(runner: GvisorRunner, ws: Path, pattern: str) -> str:
    """Command lines of the sandbox's processes that contain ``pattern``."""
    script = (f"for d in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null); "
              f"case \"$c\" in *{pattern}*) echo \"$c\";; esac; done")
    return sh(runner, script, policy(ws)).out.decode().replace(script, "").strip()


def test_kill_reaches_the_whole_tree_even_setsid(runner: GvisorRunner, ws: Path) -> None:
    proc = start(runner, ["/bin/sh", "-c", "setsid sleep 4242 & sleep 4343 & echo ready; wait"], policy(ws))
    first = os.read(proc.stdout_fd, 64)
    assert first.startswith(b"ready"), first
    proc.kill(signal.SIGKILL)
    ran = finish(proc)
    assert ran.status.signal == signal.SIGKILL and ran.status.exit_code is None
    assert "sleep 4242" not in _live(runner, ws, "sleep 4") and "sleep 4343" not in _live(runner, ws, "sleep 4")


def test_nothing_outlives_a_finished_command(runner: GvisorRunner, ws: Path) -> None:
    ran = sh(runner, "setsid sleep 4444 & nohup sleep 4545 >/dev/null 2>&1 & exit 0", policy(ws))
    assert ran.status.exit_code == 0
    assert _live(runner, ws, "sleep 4") == ""


def test_term_is_reported_as_the_signal_sent(runner: GvisorRunner, ws: Path) -> None:
    proc = start(runner, ["/bin/sh", "-c", "echo ready; exec sleep 600"], policy(ws))
    assert os.read(proc.stdout_fd, 64).startswith(b"ready")
    proc.kill(signal.SIGTERM)
    assert finish(proc).status.signal == signal.SIGTERM


def test_wall_time_limit_kills_with_124(runner: GvisorRunner, ws: Path) -> None:
    ran = sh(runner, "sleep 300", policy(ws, limits=ResourceLimits(wall_time_s=1)))
    assert ran.status.exit_code == 124


def test_file_size_and_memory_limits(runner: GvisorRunner, ws: Path) -> None:
    pol = policy(ws, limits=ResourceLimits(max_file_size_bytes=4096, max_memory_bytes=256 * 1024 * 1024))
    ran = sh(runner, "head -c 10000 /dev/zero > big; echo fsize=$?; "
                     "python3 -c 'bytearray(512*1024*1024)' 2>/dev/null; echo mem=$?", pol)
    assert b"fsize=153" in ran.out or b"fsize=1" in ran.out, ran.text
    assert (ws / "big").stat().st_size <= 4096
    assert b"mem=1" in ran.out, ran.text


def test_process_limit(runner: GvisorRunner, ws: Path) -> None:
    pol = policy(ws, limits=ResourceLimits(max_processes=8))
    ran = sh(runner, "i=0; while [ $i -lt 30 ]; do sleep 5 & i=$((i+1)); done; echo spawned", pol)
    assert b"fork" in ran.err.lower() or b"resource temporarily unavailable" in ran.err.lower(), ran.text


@pytest.mark.parametrize("installed", ["site-packages", "PYTHONPATH"])
def test_nothing_outlives_a_killed_supervisor(tmp_path: Path, runner: GvisorRunner, installed: str) -> None:
    """The CLI killed with SIGKILL: the keeper deletes the session's sandboxes,
    also when dsh is importable only through PYTHONPATH (the keeper runs ``-I``)."""
    ws = Path(os.path.realpath(tmp_path)) / "ws"
    ws.mkdir()
    code = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from dsh.runners.gvisor import GvisorRunner
        from dsh.sandbox.modes import SandboxMode
        from dsh.sandbox.policy import SandboxPolicy
        ws = Path({str(ws)!r})
        r = GvisorRunner()
        pol = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,))
        p = r.prepare(["sh", "-c", "sleep 600"], pol, cwd=str(ws), env={{"PATH": "/usr/bin:/bin"}}).start(None, None)
        print(r._state, flush=True)
        os.read(p.stdout_fd, 1)
    """)
    argv, env = [sys.executable, "-c", code], dict(os.environ)
    if installed == "PYTHONPATH":
        import dsh.runners

        base = os.path.realpath(sys.executable)  # the interpreter the venv was made from: no dsh there
        env["PYTHONPATH"] = str(Path(dsh.runners.__file__).parents[2])  # the directory holding dsh/
        bare = subprocess.run([base, "-c", "import dsh.runners"], env={**env, "PYTHONPATH": ""}, capture_output=True)
        if bare.returncode == 0:
            pytest.skip("the base interpreter has dsh installed: nothing to prove")
        argv[0] = base
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    state = Path(child.stdout.readline().strip())
    assert state.is_dir(), f"the supervisor did not start a session (exit {child.poll()})"
    child.kill()
    child.wait()
    wait_until(lambda: not state.exists(), f"the keeper to remove {state}")
    listed = subprocess.run(["pgrep", "-f", f"runsc-sandbox --root={state}"], capture_output=True, text=True)
    assert listed.stdout.strip() == ""


def test_no_setid_file_is_left_in_the_writable_roots(runner: GvisorRunner, ws: Path) -> None:
    """The gofer would apply a setuid chmod to the host's file (a setuid-root
    program when the caller is root): the filter in gVisor's kernel refuses it."""
    script = ("cp /bin/sh rootsh; chmod 4755 rootsh; chmod u+s rootsh; chmod g+s rootsh; "
              "install -m 6755 /bin/true t2; "
              "python3 -c 'import os; os.close(os.open(\"t3\", os.O_CREAT|os.O_WRONLY, 0o4755))'; "
              "echo done")
    ran = sh(runner, script, policy(ws, accept=()))
    assert b"done" in ran.out, ran.text
    for name in ("rootsh", "t2", "t3"):
        if (ws / name).exists():
            assert (ws / name).stat().st_mode & 0o6000 == 0, name
    assert runner.enforcement(policy(ws, accept=())).level == "full"


def test_explain_states_the_boundary_and_this_runscs_statx(runner: GvisorRunner, ws: Path) -> None:
    plan = runner.explain(policy(ws))
    assert "never" not in plan.rules[0] or "host kernel" in plan.rules[0]
    assert "none reaches the host kernel's system-call surface" in plan.rules[0]
    version = runner.probe().version or ""
    if version.startswith("runsc 0.0~2022"):
        assert any("AT_NO_AUTOMOUNT" in line for line in plan.cannot)
        assert b"Invalid argument" in sh(runner, "ls -l /etc/passwd", policy(ws)).err


def test_ls_failing_on_this_runscs_statx_gets_a_line_naming_the_limitation(ws: Path) -> None:
    """Through the CLI: ``ls -la`` fails on this runsc; the person is told why."""
    import sys

    ran = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "gvisor", "--", "ls", "-la"],
                         cwd=ws, capture_output=True, text=True, timeout=180, check=False)
    if "Invalid argument" not in ran.stderr:
        pytest.skip("SANDBOX_UNAVAILABLE: this runsc answers statx (no limitation to name)")
    assert "limitation file-status" in ran.stderr and "install a newer runsc" in ran.stderr, ran.stderr


def test_a_sandbox_that_died_is_made_anew(runner: GvisorRunner, ws: Path) -> None:
    pol = policy(ws)
    assert sh(runner, "true", pol).status.exit_code == 0
    warm = next(w for w in runner._warm.values() if str(ws) in {p for p in w.pinned})
    assert warm.pid is not None
    subprocess.run([*warm.runsc, "kill", "-all", warm.id, "KILL"], check=False, capture_output=True)
    subprocess.run([*warm.runsc, "delete", "-force", warm.id], check=False, capture_output=True)
    wait_until(lambda: not warm.alive(), "the sandbox to die")
    ran = sh(runner, "echo again", pol)
    assert ran.out == b"again\n", ran.text


def test_the_runners_state_is_out_of_the_commands_reach(runner: GvisorRunner, ws: Path) -> None:
    """Bundles, process files and runsc's state: a command that could rewrite
    them would shape the next sandbox runsc starts as root."""
    pol = policy(ws, roots=(ws,))
    assert sh(runner, "true", pol).status.exit_code == 0
    state = runner._state
    assert state is not None and (state / "bundles").is_dir()
    ran = sh(runner, f"test -e {state}/bundles && echo visible; echo x > {state}/planted; echo done", pol)
    assert b"done" in ran.out and b"visible" not in ran.out
    assert not (state / "planted").exists()


def test_close_leaves_nothing(ws: Path) -> None:
    own = GvisorRunner()
    pol = policy(ws)
    assert sh(own, "true", pol).status.exit_code == 0
    state = own._state
    assert state is not None
    own.close()
    wait_until(lambda: not state.exists(), f"the keeper to remove {state}")
    listed = subprocess.run(["pgrep", "-f", f"runsc-sandbox --root={state}"], capture_output=True, text=True)
    assert listed.stdout.strip() == ""
    assert not (ws / ".dsh").exists()  # the placeholder went with the sandbox


def test_network_off_and_on(runner: GvisorRunner, ws: Path) -> None:
    """Off: gVisor's own loopback only, a host listener is unreachable.  On: the
    host's network (no network namespace of the sandbox's own)."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        srv.settimeout(PATIENCE_S)
        port = srv.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=10); print('connected')"
        off = run(runner, ["python3", "-c", probe], policy(ws))
        assert off.status.exit_code != 0 and b"connected" not in off.out
        on = run(runner, ["python3", "-c", probe], policy(ws, network=True))
        assert on.out == b"connected\n", on.text
        srv.accept()[0].close()


def test_without_root_the_network_on_is_refused_with_the_reason(ws: Path) -> None:
    """runsc cannot start a rootless sandbox on the host's network (measured as nobody)."""
    from dsh.runners.gvisor.spec import Identity

    own = GvisorRunner()
    require_runner("gvisor", own)
    own.identity = Identity(65534, 65534)
    try:
        with pytest.raises(SandboxUnavailable, match="turn the network off"):
            own.prepare(["true"], policy(ws, network=True), cwd=str(ws), env=ENV)
        assert any("network" in line for line in own.explain(policy(ws, network=True)).cannot)
    finally:
        own.close()


def test_a_placeholder_that_cannot_be_made_is_a_clean_refusal(runner: GvisorRunner, ws: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.runners.gvisor import sandbox as sb

    def refuse(path: str, parent_fd: int | None = None) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(sb.Placeholder, "acquire", staticmethod(refuse))
    with pytest.raises(SandboxUnavailable, match=r"placeholder .*\.dsh.*Permission denied; nothing ran"):
        runner.prepare(["true"], policy(ws), cwd=str(ws), env=ENV)


def test_a_placeholder_is_made_in_the_pinned_directory_never_through_its_name(
        runner: GvisorRunner, ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A workspace swapped for a link after it was resolved must not get the
    placeholder made wherever the link points: it is made from the fd of the
    directory the policy pinned."""
    from dsh.runners.gvisor import sandbox as sb

    real_acquire = sb.Placeholder.acquire
    parents: list[str | None] = []

    def spy(path: str, parent_fd: int | None = None) -> sb.Placeholder | None:
        parents.append(None if parent_fd is None else os.readlink(f"/proc/self/fd/{parent_fd}"))
        return real_acquire(path, parent_fd)

    monkeypatch.setattr(sb.Placeholder, "acquire", staticmethod(spy))
    fresh = ws.parent / "fresh"
    fresh.mkdir()
    launch = runner.prepare(["true"], policy(fresh), cwd=str(fresh), env=ENV)
    assert launch is not None
    assert parents and all(parent == str(fresh) for parent in parents), parents


def test_tmpdir_names_the_session_directory_where_it_is_mounted(runner: GvisorRunner, ws: Path) -> None:
    """The session's directory is shown at /tmp, so TMPDIR says /tmp: its real
    path under a long HOME would put a unix socket (a multiprocessing Manager)
    past the kernel's 108-byte limit."""
    import dataclasses

    from dsh.runners.gvisor.runner import RemoteLaunch

    session = ws.parent / ("session-" + "x" * 80)
    session.mkdir()
    pol = dataclasses.replace(policy(ws, roots=(ws, session)), private_tmp=session)
    script = ('echo "$TMPDIR"; echo x > "$TMPDIR/f"; python3 -c "import socket, tempfile, os; '
              's = socket.socket(socket.AF_UNIX); '
              's.bind(os.path.join(tempfile.mkdtemp(), \'l\' * 20)); print(\'bound\')"')
    launch = runner.prepare(["/bin/sh", "-c", script], pol, cwd=str(ws), env={**ENV, "TMPDIR": str(session)})
    assert isinstance(launch, RemoteLaunch)
    ran = finish(launch.start(None, None))
    assert ran.status.exit_code == 0, ran.text
    assert ran.out.splitlines()[0] == b"/tmp" and b"bound" in ran.out, ran.text
    assert (session / "f").read_text() == "x\n"
