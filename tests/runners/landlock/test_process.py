"""Process-level escapes, the parent staying unrestricted, and exact argv."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.runners.landlock import LandlockRunner
from dsh.sandbox.modes import SandboxMode

from tests.runners.landlock.helpers import PY, RO, WW, make_policy, py, run, sh
from tests.support.wait import wait_until

MODES = [pytest.param(RO, id="read-only"), pytest.param(WW, id="workspace-write")]
Layout = tuple[Path, Path]


def _status(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _task_statuses(tids: list[str]) -> list[dict[str, str]]:
    """The status of each listed thread of this process that still exists.

    A thread may exit between listing ``/proc/self/task`` and opening its
    entry (ENOENT, or ESRCH once opened); a thread that is gone holds no filter.
    """
    found = []
    for tid in tids:
        try:
            found.append(_status(f"/proc/self/task/{tid}/status"))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


@pytest.mark.parametrize("mode", MODES)
def test_signalling_a_process_outside_is_denied(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    victim = subprocess.Popen(["sleep", "300"])
    try:
        result = sh(
            runner,
            make_policy(mode, layout[0]),
            f"kill -TERM {victim.pid}; echo outside=$?; sleep 100 & kill -TERM $!; wait $!; echo own=$?",
        )
        assert "outside=1" in result.out and "own=143" in result.out, result.out + result.err
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()


@pytest.fixture
def setuid_id() -> Iterator[Path]:
    """A copy of ``id`` that is setuid to ``nobody``.

    The sandboxed command runs as the caller (root here): the spawner thread
    keeps no CAP_SETUID, so it cannot start a command as another user, and an
    identity change by a setuid bit is what must not happen.
    """
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: needs root to create a setuid binary of another user")
    folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dsh-landlock-suid-"))
    try:
        folder.chmod(0o755)
        binary = folder / "id"
        shutil.copy2("/usr/bin/id", binary)
        os.chown(binary, 65534, 65534)
        binary.chmod(0o4755)
        yield binary
    finally:
        shutil.rmtree(folder)


def test_setuid_binary_gains_nothing(runner: LandlockRunner, layout: Layout, setuid_id: Path) -> None:
    control = subprocess.run([str(setuid_id), "-u"], capture_output=True, text=True, check=True)
    assert control.stdout.strip() == "65534"  # the control: outside the sandbox the bit applies
    result = run(runner, make_policy(RO, layout[0]), [str(setuid_id), "-u"])
    assert result.out.strip() == "0", result.err  # no_new_privs: the setuid bit is ignored


def test_tiocsti_on_the_terminal_is_refused(runner: LandlockRunner, layout: Layout) -> None:
    code = (
        "import fcntl, termios\n"
        "try:\n"
        "    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('ok')\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
    )
    master, slave = os.openpty()
    try:
        control = subprocess.run([PY, "-c", code], stdin=slave, capture_output=True, text=True)
        result = py(runner, make_policy(WW, layout[0]), code, stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert result.out.strip() == str(errno.EPERM), result.err
    assert control.stdout.strip() != str(errno.EPERM)  # the refusal is the filter's


def test_io_uring_is_refused(runner: LandlockRunner, layout: Layout) -> None:
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "params = ctypes.create_string_buffer(120)\n"
        "fd = libc.syscall(425, 4, params)\n"
        "print('ok' if fd >= 0 else ctypes.get_errno())\n"
    )
    control = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    result = py(runner, make_policy(WW, layout[0]), code)
    assert result.out.strip() == str(errno.ENOSYS), result.err
    assert control.stdout.strip() != str(errno.ENOSYS)


def test_child_is_restricted_and_the_parent_is_not(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    policy = make_policy(WW, ws)
    for _ in range(40):
        assert run(runner, policy, ["true"]).returncode == 0
    child = sh(runner, policy, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status")
    assert child.out.split() == ["NoNewPrivs:", "1", "Seccomp:", "2"]

    def unrestricted_here() -> None:
        status = _status(f"/proc/self/task/{threading.get_native_id()}/status")
        assert (status["NoNewPrivs"], status["Seccomp"]) == ("0", "0")
        target = outside / f"host-{threading.get_native_id()}.txt"
        target.write_text("host can write\n")  # outside the workspace
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM):
            pass

    unrestricted_here()  # the main thread
    assert _status("/proc/self/status")["Seccomp"] == "0"  # the thread group leader
    errors: list[BaseException] = []

    def in_thread() -> None:
        try:
            unrestricted_here()
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert errors == []
    # Only the runner's spawner threads carry the filter.
    restricted = [s["Name"] for s in _task_statuses(os.listdir("/proc/self/task")) if s["Seccomp"] != "0"]
    assert restricted and all(name.startswith("dsh-landlock") for name in restricted), restricted


def test_a_thread_gone_since_the_listing_is_skipped() -> None:
    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()  # the Python thread is done; the kernel's may linger a moment
    assert gone.native_id is not None
    wait_until(lambda: not os.path.exists(f"/proc/self/task/{gone.native_id}"), "the thread to exit")
    listing = [str(threading.get_native_id()), str(gone.native_id)]
    assert [s["Pid"] for s in _task_statuses(listing)] == [listing[0]]


def test_spawn_errors_are_re_raised(runner: LandlockRunner, layout: Layout) -> None:
    with pytest.raises(FileNotFoundError):
        run(runner, make_policy(RO, layout[0]), ["/nonexistent/program"])


ARGV_ITEMS: list[str | bytes] = [
    "two words",
    "'single'",
    '"double"',
    "$HOME `id` $(id)",
    "line\nbreak",
    "",
    "ünïcödé",
    b"\xff\xfe not utf-8",
    "*",
    "--",
]


@pytest.mark.parametrize("mode", MODES)
def test_exact_argv_round_trip(runner: LandlockRunner, layout: Layout, mode: SandboxMode) -> None:
    code = "import os, sys\nsys.stdout.write(' '.join(os.fsencode(a).hex() for a in sys.argv[1:]))"
    argv: list[str | bytes] = [PY, "-c", code, *ARGV_ITEMS]
    launch = runner.prepare(argv, make_policy(mode, layout[0]), cwd=str(layout[0]), env={})
    assert launch.argv == tuple(argv)  # unchanged, item for item
    result = run(runner, make_policy(mode, layout[0]), argv)
    expected = " ".join(os.fsencode(a).hex() for a in ARGV_ITEMS)
    assert result.out == expected, result.err


def test_danger_full_access_is_not_restricted(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    policy = make_policy(SandboxMode.DANGER_FULL_ACCESS, ws, network=True)
    assert runner.enforcement(policy).level == "full"
    launch = runner.prepare(["true"], policy, cwd=str(ws), env={})
    assert launch.spawn_in is None and launch.argv == ("true",)
    result = sh(runner, policy, f"echo host > '{outside}/danger.txt'")
    assert result.returncode == 0
    assert (outside / "danger.txt").read_text() == "host\n"


def test_python_helper_is_not_re_executed(runner: LandlockRunner, layout: Layout) -> None:
    # The launch runs the command itself: no interpreter or wrapper in front of it.
    launch = runner.prepare(["true"], make_policy(WW, layout[0]), cwd=str(layout[0]), env={})
    assert launch.argv == ("true",)
    assert sys.executable not in launch.argv


def test_concurrent_spawns_from_many_threads(runner: LandlockRunner, layout: Layout) -> None:
    ws, outside = layout
    policies = [make_policy(WW, ws), make_policy(RO, ws)]
    results: list[tuple[SandboxMode, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        policy = policies[index % 2]
        try:
            for n in range(4):
                result = sh(runner, policy, f"echo {index}-{n} > w{index}-{n}.txt; echo x > '{outside}/o{index}'")
                with lock:
                    results.append((policy.mode, result.returncode))
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [] and len(results) == 32
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    written = sorted(p.name for p in ws.iterdir() if p.name.startswith("w"))
    assert written == sorted(f"w{i}-{n}.txt" for i in range(0, 8, 2) for n in range(4))
