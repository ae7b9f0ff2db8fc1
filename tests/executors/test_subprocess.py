"""The subprocess service: spill files, env, stdin, huge and odd output, launches."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dsh.executors.capture import StreamCapture
from dsh.executors.process import LocalSubprocessService, layer_env, scrub_environ
from dsh.executors.pump import Pump
from dsh.executors.seam import ShellExecutor
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import Context
from dsh.sandbox.runner import ExitStatus, LocalLaunch, RemoteLaunch, RemoteProcess

from tests.support.executors import make_context, run, start
from tests.support.wait import PATIENCE_S, wait_until


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    context = make_context(tmp_path, grace_ms=500)
    yield context
    context.close()


# -- spill ------------------------------------------------------------------------------
def test_spill_file_is_private_and_complete(ctx: Context) -> None:
    result = run(ctx, "seq 1 100000", stdout_max_bytes=4000)
    full = "".join(f"{i}\n" for i in range(1, 100001)).encode()
    out = result.stdout
    assert out.total_bytes == len(full)
    assert out.spill_path is not None and not out.spill_truncated
    assert not out.spill_path.startswith("/tmp/")  # /tmp is a writable root
    assert stat.S_IMODE(os.stat(out.spill_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(out.spill_path)).st_mode) == 0o700
    assert Path(out.spill_path).read_bytes() == full
    assert full.endswith(out.text.encode()) and len(out.text) <= 4000
    assert out.omitted_bytes == len(full) - len(out.text)
    assert out.omitted_lines == full.count(b"\n") - out.text.count("\n")
    assert result.stderr.spill_path is None  # a short stream never touches the disk


def test_spill_cap_truncates_and_says_so(tmp_path: Path) -> None:
    context = make_context(tmp_path, max_spill_bytes=100000)
    try:
        result = run(context, "head -c 300000 /dev/zero", stdout_max_bytes=1000)
        assert result.stdout.spill_path is not None and result.stdout.spill_truncated
        assert os.path.getsize(result.stdout.spill_path) == 100000
        assert result.stdout.total_bytes == 300000
    finally:
        context.close()


def test_spill_files_are_removed_at_teardown(tmp_path: Path) -> None:
    context = make_context(tmp_path)
    result = run(context, "head -c 200000 /dev/zero")
    assert result.stdout.spill_path is not None and os.path.exists(result.stdout.spill_path)
    context.close()
    assert not os.path.exists(result.stdout.spill_path)


# -- environment ---------------------------------------------------------------------------
def test_env_scrub_and_layering(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MY_API_KEY", "GH_TOKEN", "db_password", "AWS_SECRET_ACCESS_KEY", "DSH_STALE"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("DSH_HOME", "/stale/home")  # inherited: dropped, the managed one wins
    monkeypatch.setenv("KEEP_ME", "kept")
    monkeypatch.setenv("TERM", "xterm-256color")
    result = run(
        ctx,
        "env",
        env={"PAGER": "less", "CALLER": "1", "DSH_HOME": "/caller/home", "DSH_EXTRA": "x"},
    )
    env = dict(line.split("=", 1) for line in result.stdout.text.splitlines() if "=" in line)
    assert "leak" not in env.values()
    assert env["KEEP_ME"] == "kept" and env["CALLER"] == "1"
    assert (env["NO_COLOR"], env["TERM"], env["GIT_PAGER"]) == ("1", "dumb", "cat")
    assert env["PAGER"] == "less"  # the caller's env layers over ENV_OVERRIDES
    assert env["DSH_HOME"] == ctx.require(ShellEnvRegistry).collect()["DSH_HOME"] != "/caller/home"
    assert "DSH_EXTRA" not in env  # the DSH_ namespace comes from the trusted snapshot only


def test_env_helpers() -> None:
    assert scrub_environ({"A": "1", "x_key_y": "2", "DSH_X": "3", "Token": "4"}) == {"A": "1"}
    layered = layer_env({"TERM": "x", "B": "b"}, {"B": "c", "DSH_A": "no"}, {"DSH_A": "yes", "Z": "no"})
    assert layered == {"TERM": "dumb", "B": "c", "NO_COLOR": "1", "PAGER": "cat", "GIT_PAGER": "cat", "DSH_A": "yes"}


# -- stdin -----------------------------------------------------------------------------------
@pytest.mark.parametrize("stdin", [None, b""])
def test_empty_stdin_is_eof_at_once(ctx: Context, stdin: bytes | None) -> None:
    result = run(ctx, "cat; echo end", stdin=stdin)
    assert (result.exit_code, result.stdout.text) == (0, "end\n")


def test_many_mib_of_stdin_in_and_out_without_deadlock(ctx: Context) -> None:
    payload = os.urandom(24 << 20)
    result = run(ctx, "tee /dev/stderr | sha256sum", stdin=payload)
    assert result.exit_code == 0
    assert result.stdout.text.split()[0] == hashlib.sha256(payload).hexdigest()
    assert result.stderr.total_bytes == len(payload)


def test_stdin_a_command_does_not_read(ctx: Context) -> None:
    result = run(ctx, "exec 0<&-; echo done", stdin=b"x" * (8 << 20))
    assert (result.exit_code, result.stdout.text) == (0, "done\n")


# -- odd output -----------------------------------------------------------------------------
def test_non_utf8_output(ctx: Context) -> None:
    result = run(ctx, "printf 'ok\\377\\376\\n'; printf '\\303' >&2")
    assert result.stdout.total_bytes == 5
    assert result.stdout.text == "ok\ufffd\ufffd\n"
    assert result.stderr.text == "\ufffd"  # the input's own broken byte, not a cut's


def test_command_that_closes_stdout_early(ctx: Context) -> None:
    result = run(ctx, "echo before; exec 1>&-; sleep 0.3; echo after >&2; exit 3")
    assert (result.exit_code, result.stdout.text, result.stderr.text) == (3, "before\n", "after\n")


def test_exact_bytes_argv(ctx: Context) -> None:
    # No shell in between: spaces, "$" and non-UTF-8 bytes arrive unchanged.
    spec = ctx.require(ShellExecutor).resolve(_request(argv=(b"printf", b"%s|", "a b", "$x", b"\xff")))
    result = ctx.require(ShellExecutor).execute(spec).result(timeout=PATIENCE_S)
    assert result.exit_code == 0
    assert result.stdout.text == "a b|$x|\ufffd|"


def _request(**kwargs: Any) -> Any:
    from dsh.executors.seam import ShellExecRequest

    return ShellExecRequest(command="", **kwargs)


GIB_SCRIPT = textwrap.dedent(
    """
    import sys
    from dsh.sandbox.context import build_context
    from dsh.executors.seam import ShellExecRequest, ShellExecutor
    ctx = build_context([{"id": "b", "name": "bash-local", "config": {"cwd": sys.argv[1]}}])
    spec = ctx.require(ShellExecutor).resolve(ShellExecRequest(command="head -c 3G /dev/zero; echo tail"))
    result = ctx.require(ShellExecutor).execute(spec).result()
    ctx.close()
    print(result.stdout.total_bytes, result.exit_code, repr(result.stdout.text[-6:]),
          result.stdout.spill_truncated,
          # VmHWM, not ru_maxrss: at exec, ru_maxrss takes over the forking parent's
          # resident size (pytest's own, hundreds of MiB late in a full run).
          [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")][0])
    """
)


def test_several_gib_of_output_in_bounded_memory(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", GIB_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    total, code, tail, truncated, maxrss_kib = out.stdout.split()
    assert int(total) == (3 << 30) + 5 and code == "0"
    assert tail == repr("\0tail\n") and truncated == "True"
    assert int(maxrss_kib) < 100 * 1024  # the executor never held the 3 GiB stream


# -- launches -------------------------------------------------------------------------------
def _spawn(
    service: LocalSubprocessService, launch: Any, tmp_path: Path, **kwargs: Any
) -> tuple[Pump, StreamCapture, StreamCapture]:
    out = service.capture("stdout", max_bytes=10000, max_spill_bytes=0)
    err = service.capture("stderr", max_bytes=10000, max_spill_bytes=0)
    kwargs.setdefault("grace_ms", 300)
    pump = service.spawn(
        launch, cwd=str(tmp_path), env={"PATH": os.environ["PATH"]}, stdin=None, stdout=out, stderr=err, **kwargs
    )
    return pump, out, err


def test_local_launch_spawn_in_env_pass_fds_cleanup_and_kill_tree(ctx: Context, tmp_path: Path) -> None:
    service: LocalSubprocessService = ctx.require(LocalSubprocessService)
    calls: dict[str, Any] = {"spawn_threads": [], "kills": [], "cleanups": 0}
    read_end, write_end = os.pipe()

    def spawn_in(fn: Callable[[], Any]) -> Any:
        box: list[Any] = []
        worker = threading.Thread(target=lambda: box.append(fn()))  # like Landlock's thread
        worker.start()
        worker.join()
        calls["spawn_threads"].append(worker.name)
        return box[0]

    def cleanup() -> None:
        calls["cleanups"] += 1

    launch = LocalLaunch(
        argv=("bash", "-c", f'echo "$RUNNER_VAR" >&{write_end}; echo $$; sleep 1000'),
        spawn_in=spawn_in,
        env={"RUNNER_VAR": "from-runner"},
        pass_fds=(write_end,),
        kill_tree=lambda pid, sig: calls["kills"].append((pid, sig)),
        cleanup=cleanup,
    )
    pump, out, _ = _spawn(service, launch, tmp_path)
    os.close(write_end)
    assert os.read(read_end, 100) == b"from-runner\n"
    os.close(read_end)
    assert len(calls["spawn_threads"]) == 1
    wait_until(lambda: b"\n" in out.read_from(0)[1])
    pid = int(out.read_from(0)[1])
    assert pump.terminate() is True
    assert pump.wait(PATIENCE_S)
    assert pump.status == ExitStatus(exit_code=None, signal=signal.SIGTERM)
    assert (pid, signal.SIGTERM) in calls["kills"]
    assert calls["cleanups"] == 1


class ThreadRemote(RemoteProcess):
    """A remote process played by a thread (the runner's side of the pipes)."""

    def __init__(self, stdin: bytes | None, lines: int) -> None:
        out_r, self._out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        self.stdout_fd, self.stderr_fd = out_r, err_r
        self.signals: list[int] = []
        self.closed = False
        self._stop = threading.Event()
        self._status: ExitStatus | None = None
        self._lines = lines
        self._stdin = stdin or b""
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        os.write(self._out_w, b"stdin=" + self._stdin + b"\n")
        for i in range(self._lines):
            os.write(self._out_w, f"line {i}\n".encode())
        os.write(self._err_w, b"remote err\n")
        killed = self._stop.wait(3600 if self._lines < 0 else 0)
        os.close(self._out_w)
        os.close(self._err_w)
        self._status = ExitStatus(exit_code=None, signal=signal.SIGTERM) if killed else ExitStatus(exit_code=0)

    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        self._thread.join(timeout)
        return self._status

    def kill(self, sig: int) -> None:
        self.signals.append(sig)
        self._stop.set()

    def close(self) -> None:
        self.closed = True


def test_remote_process_is_driven_like_a_local_one(ctx: Context, tmp_path: Path) -> None:
    remotes: list[ThreadRemote] = []

    def starter(lines: int) -> RemoteLaunch:
        def begin(stdin: bytes | None, deadline: float | None) -> RemoteProcess:
            remotes.append(ThreadRemote(stdin, lines))
            return remotes[-1]

        return RemoteLaunch(start=begin)

    service: LocalSubprocessService = ctx.require(LocalSubprocessService)
    pump, out, err = _spawn(service, starter(3), tmp_path)
    assert pump.wait(PATIENCE_S)
    assert pump.status == ExitStatus(exit_code=0)
    assert out.read_from(0)[1] == b"stdin=\nline 0\nline 1\nline 2\n"
    assert err.read_from(0)[1] == b"remote err\n"
    assert remotes[0].closed
    # A remote command that runs forever stops at the deadline, like a local one.
    expired: list[bool] = []
    pump, _, _ = _spawn(service, starter(-1), tmp_path, deadline=0.0, on_deadline=lambda: expired.append(True))
    pump.terminate()
    assert pump.wait(PATIENCE_S)
    assert expired == [True] and remotes[1].signals[0] == signal.SIGTERM
    assert pump.status == ExitStatus(exit_code=None, signal=signal.SIGTERM)


def test_remote_launch_through_the_executor(tmp_path: Path) -> None:
    from dsh.executors.local import LocalBashExecutor

    from tests.executors.test_execution import _mount

    class RemoteExecutor(LocalBashExecutor):
        def prepare_launch(self, argv: Any, spec: Any, env: Any) -> RemoteLaunch:
            return RemoteLaunch(start=lambda stdin, deadline: ThreadRemote(stdin, 2))

    context = _mount(tmp_path, RemoteExecutor)
    try:
        result = run(context, "ignored by the fake remote", stdin=b"in")
        assert result.exit_code == 0
        assert result.stdout.text == "stdin=in\nline 0\nline 1\n"
        assert result.stderr.text == "remote err\n"
    finally:
        context.close()


def test_start_new_session(ctx: Context) -> None:
    execution = start(ctx, "echo $$ $(ps -o sid= -p $$)")
    assert execution.wait(PATIENCE_S)
    pid, sid = execution.result().stdout.text.split()
    assert pid == sid  # leader of its own session and process group


def test_remote_start_failure_settles_killed_and_cleans_up(tmp_path: Path) -> None:
    from dsh.executors.local import LocalBashExecutor

    from tests.executors.test_execution import _mount

    cleanups: list[bool] = []

    def fail(stdin: bytes | None, deadline: float | None) -> RemoteProcess:
        raise RuntimeError("exec create failed")

    class FailingRemoteExecutor(LocalBashExecutor):
        def prepare_launch(self, argv: Any, spec: Any, env: Any) -> RemoteLaunch:
            return RemoteLaunch(start=fail, cleanup=lambda: cleanups.append(True))

    context = _mount(tmp_path, FailingRemoteExecutor)
    try:
        result = run(context, "true")
        assert result.exit_code is None and not result.timed_out
        assert result.stderr.text == "spawn failed: exec create failed\n"
        assert cleanups == [True]
    finally:
        context.close()
