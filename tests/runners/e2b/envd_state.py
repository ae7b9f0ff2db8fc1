"""The sandbox side of the envd test double: the emulated machine, users, processes.

See ``envd_server`` for what the double is (and is not).
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import selectors
import shutil
import signal
import struct
import subprocess
import termios
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2b.envd.process import process_pb
from protobuf import Oneof

from tests.runners.e2b.machine import PATH, STATE_DIR, Machine, MachineError, own_session_keyring, signal_pidfd

_CHUNK = 32 << 10
_GO_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGKILL: "killed", signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupt", signal.SIGHUP: "hangup"}


@dataclass(frozen=True)
class StartRecord:
    """What one ``Start`` asked for (tests check which protocol path a runner took)."""

    argv: tuple[str, ...]
    user: str
    pty: tuple[int, int] | None  # (rows, cols) when the request carried a pty


def oneof(field: str, value: Any) -> Any:
    """``Oneof`` with a runtime field name (its stubs want a literal)."""
    return Oneof(field, value)


class EnvdDouble:
    """The sandbox state: an emulated machine over ``root``, its users and processes."""

    def __init__(self, root: Path, *, sudoers: tuple[str, ...], keepalive_s: float) -> None:
        self.root = root.resolve()
        self.keepalive_s = keepalive_s
        self.procs: dict[int, _Proc] = {}
        self.starts: list[StartRecord] = []
        self.lock = threading.Lock()
        self.sudoers = sudoers
        self.expired = False
        self.machine = Machine(self.root)
        self._init_root()

    def _init_root(self) -> None:
        self.machine.prepare_root()
        state = self.root / STATE_DIR
        (state / "sudoers").write_text("".join(f"{u}\n" for u in self.sudoers))
        write_shims(state / "bin", multi_user=self.machine.multi_user)
        self.machine.start()

    def expire(self) -> None:
        """The sandbox is killed (past its lifetime): its processes die and E2B's
        proxy answers 502 "... was not found" until a new sandbox is created,
        which in debug mode shows as the next ``/health`` (see ``revive``)."""
        self.kill_all()
        self.expired = True

    def revive(self) -> None:
        """A newly created sandbox: a fresh machine in the same root."""
        self.machine.stop()
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        self._init_root()
        self.expired = False

    def account(self, user: str) -> tuple[int, int, str]:
        """(uid, gid, home) of a user of the machine's own ``/etc/passwd``."""
        fd = os.open(self.root / "etc/passwd", os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as passwd:
            for line in passwd.read().splitlines():
                fields = line.split(":")
                if len(fields) >= 6 and fields[0] == user:
                    return int(fields[2]), int(fields[3]), fields[5]
        raise ConnectError("invalid_argument", f"user {user!r} does not exist in the sandbox")

    def home(self, user: str) -> str:
        return self.account(user)[2]

    def absolute(self, path: str, user: str) -> str:
        """A sandbox path: absolute, or relative to the user's home (as envd does)."""
        return path if path.startswith("/") else f"{self.home(user).rstrip('/')}/{path}"

    def host_path(self, path: str, user: str) -> Path:
        """Where the host sees a sandbox path (for tests; the double itself reads and
        writes files inside the machine, as the user, like envd)."""
        parts = [p for p in self.absolute(path, user).split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ConnectError("invalid_argument", f"path {path!r} has '..'")
        return self.root.joinpath(*parts)

    def read_file(self, path: str, user: str) -> bytes:
        uid, gid, _ = self.account(user)
        done = self.machine.run(["cat", "--", self.absolute(path, user)], uid=uid, gid=gid)
        if done.returncode:
            raise ConnectError("not_found", done.stderr.decode("utf-8", "replace").strip())
        return done.stdout

    def write_file(self, path: str, data: bytes, user: str) -> None:
        uid, gid, _ = self.account(user)
        done = self.machine.run(
            ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh",
             self.absolute(path, user)], uid=uid, gid=gid, stdin=data)
        if done.returncode:
            raise ConnectError("invalid_argument", done.stderr.decode("utf-8", "replace").strip())

    def spawn(self, config: Any, user: str, stdin: bool, timeout_ms: int | None,
              pty: tuple[int, int] | None = None) -> _Proc:
        """Start ``config`` as ``user``; with ``pty`` (rows, cols), on a new pty of
        that size that is the command's controlling terminal (envd's pty start)."""
        uid, gid, home = self.account(user)
        cwd = self.absolute(config.cwd or home, user)
        env = {"PATH": PATH, "HOME": home, "USER": user, "LOGNAME": user,
               **dict(config.envs or {})}
        argv = [config.cmd, *config.args]
        with self.lock:
            self.starts.append(StartRecord(tuple(argv), user, pty))
        master = slave = -1
        if pty is not None:
            try:
                master, slave = self.machine.openpty()
            except (OSError, MachineError) as exc:
                raise ConnectError("invalid_argument", f"error starting pty: {exc}") from exc
            set_winsize(master, *pty)
        try:
            popen = subprocess.Popen(  # envd does not start a new process group either
                self.machine.argv(argv, uid=uid, gid=gid, cwd=cwd, pty=pty is not None), env=env,
                stdin=slave if pty else subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=slave if pty else subprocess.PIPE, stderr=slave if pty else subprocess.PIPE,
                preexec_fn=own_session_keyring)
        except (OSError, MachineError) as exc:
            if pty is not None:
                os.close(master)
                os.close(slave)
            raise ConnectError("invalid_argument", f"error starting process: {exc}") from exc
        if pty is not None:
            os.close(slave)  # the command holds it now: EIO on the master once all are gone
            first = _first_line(master).rstrip(b"\r")
        else:
            assert popen.stdout is not None
            first = _first_line(popen.stdout.fileno())
        if not first.isdigit():
            popen.wait()
            if pty is not None:
                why = _read_nonblocking(master).decode("utf-8", "replace").strip()
                os.close(master)
            else:
                assert popen.stdout is not None and popen.stderr is not None
                why = popen.stderr.read().decode("utf-8", "replace").strip()
                popen.stdout.close()
                popen.stderr.close()
                if popen.stdin is not None:
                    popen.stdin.close()
            if first == b"nocwd":
                raise ConnectError("invalid_argument", f"cwd '{config.cwd}' does not exist")
            raise ConnectError("invalid_argument", f"error starting process: {why}")
        proc = _Proc(popen, int(first), _child_pidfd(popen.pid), argv, timeout_ms,
                     master if pty is not None else None)
        with self.lock:
            self.procs[proc.pid] = proc
        return proc

    def get(self, selector: Any) -> _Proc:
        pid = selector.selector.value if selector and selector.selector else None
        with self.lock:
            proc = self.procs.get(pid) if isinstance(pid, int) else None
        if proc is None or proc.ended.is_set():
            raise ConnectError("not_found", f"process with pid {pid} not found")
        return proc

    def kill_all(self) -> None:
        with self.lock:
            procs = list(self.procs.values())
        for proc in procs:
            proc.signal(signal.SIGKILL)
        self.machine.stop()


def set_winsize(master: int, rows: int, cols: int) -> None:
    """TIOCSWINSZ on the master: the kernel sends SIGWINCH to the terminal's
    foreground process group when the size changes (as envd's ``pty.Setsize``)."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _first_line(fd: int) -> bytes:
    """The launcher's report, read byte by byte so no command output is consumed."""
    line = bytearray()
    while len(line) < 32 and (byte := os.read(fd, 1)) and byte != b"\n":
        line += byte
    return bytes(line)


def _child_pidfd(nsenter_pid: int) -> int | None:
    """A pidfd of the command: nsenter's child (None once it has already ended)."""
    try:
        children = Path(f"/proc/{nsenter_pid}/task/{nsenter_pid}/children").read_text().split()
        return os.pidfd_open(int(children[0])) if children else None
    except (OSError, ValueError):
        return None


class _Proc:
    """One started process: a pump thread turns its pipes and exit into events."""

    def __init__(self, popen: subprocess.Popen[bytes], pid: int, pidfd: int | None,
                 argv: list[str], timeout_ms: int | None, master: int | None = None) -> None:
        self.popen = popen  # nsenter, on the host: it ends with the command's status
        self.master = master  # the pty's master (None: plain pipes)
        self.pid = pid  # inside the machine
        self.pidfd = pidfd  # the command itself, to signal it from the host
        self.argv = argv
        self.events: queue.Queue[Any] = queue.Queue()
        self.ended = threading.Event()
        self.stdin_lock = threading.Lock()
        self.timer = None
        if timeout_ms:  # envd kills the process at the request deadline
            self.timer = threading.Timer(timeout_ms / 1000, self.signal, (signal.SIGKILL,))
            self.timer.daemon = True
            self.timer.start()
        threading.Thread(target=self._pump, daemon=True).start()

    def signal(self, sig: int) -> None:
        if not self.ended.is_set() and self.pidfd is not None:
            signal_pidfd(self.pidfd, sig)

    def write_pty(self, data: bytes) -> None:
        with self.stdin_lock:
            if self.master is None or self.ended.is_set():
                raise ConnectError("failed_precondition", "tty not assigned to process")
            view = memoryview(data)
            while view:
                view = view[os.write(self.master, view):]

    def resize(self, rows: int, cols: int) -> None:
        with self.stdin_lock:
            if self.master is None or self.ended.is_set():
                raise ConnectError("failed_precondition", "tty not assigned to process")
            set_winsize(self.master, rows, cols)

    def _pump(self) -> None:
        sel = selectors.DefaultSelector()
        if self.master is not None:
            sel.register(self.master, selectors.EVENT_READ, "pty")
        else:
            assert self.popen.stdout is not None and self.popen.stderr is not None
            sel.register(self.popen.stdout, selectors.EVENT_READ, "stdout")
            sel.register(self.popen.stderr, selectors.EVENT_READ, "stderr")
        pidfd = os.pidfd_open(self.popen.pid)
        sel.register(pidfd, selectors.EVENT_READ, "exit")
        exited = False
        while not exited and len(sel.get_map()) > 1:
            for key, _ in sel.select():
                if key.data == "exit":
                    exited = True
                    continue
                chunk = _read(key.fd)
                if chunk:
                    self.events.put(_data(key.data, chunk))
                else:
                    sel.unregister(key.fileobj)
        # Like envd (Go's cmd.Wait closes the pipes), the stream ends when the
        # started process exits; output a grandchild writes later is dropped.
        for key in list(sel.get_map().values()):
            if key.data != "exit":
                os.set_blocking(key.fd, False)
                while chunk := _read_nonblocking(key.fd):
                    self.events.put(_data(key.data, chunk))
        sel.close()
        os.close(pidfd)
        returncode = self.popen.wait()
        if self.timer is not None:
            self.timer.cancel()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for pipe in (self.popen.stdout, self.popen.stderr, self.popen.stdin):
            if pipe is not None:
                pipe.close()
        with self.stdin_lock:
            self.ended.set()
            if self.master is not None:
                os.close(self.master)  # envd closes the tty after Wait
                self.master = None
        self.events.put(_end(returncode))


def _read(fd: int) -> bytes:
    """A chunk; b"" at the end (a pty master reads EIO once no slave is open)."""
    try:
        return os.read(fd, _CHUNK)
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise


def _read_nonblocking(fd: int) -> bytes:
    try:
        os.set_blocking(fd, False)
        return _read(fd)
    except BlockingIOError:
        return b""


def _data(stream: str, chunk: bytes) -> Any:
    data = process_pb.ProcessEvent.DataEvent(output=oneof(stream, chunk))
    return process_pb.ProcessEvent(event=oneof("data", data))


def _end(returncode: int) -> Any:
    """The end event envd sends: Go's ProcessState fields and cmd.Wait error."""
    error: str | None
    if returncode < 0:
        name = _GO_SIGNAL_NAMES.get(-returncode, f"signal {-returncode}")
        status, code, error = f"signal: {name}", -1, f"signal: {name}"
    else:
        status, code = f"exit status {returncode}", returncode
        error = status if returncode else None
    end = process_pb.ProcessEvent.EndEvent(
        exit_code=code, exited=returncode >= 0, status=status, error=error)
    return process_pb.ProcessEvent(event=oneof("end", end))


CONNECT_HTTP_STATUS = {"invalid_argument": 400, "unauthenticated": 401, "not_found": 404,
             "unimplemented": 501, "internal": 500, "failed_precondition": 400}


class ConnectError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def write_shims(bindir: Path, *, multi_user: bool) -> None:
    """``sudo`` for the users in the double's sudoers list (there is no setuid
    ``sudo`` to install: it runs the command as the same user); with one uid
    only, ``useradd``/``chown`` act on the machine's passwd list."""
    shims = {
        "sudo": f"""#!/bin/sh
if ! grep -qx "$USER" /{STATE_DIR}/sudoers; then echo "sudo: a password is required" >&2; exit 1; fi
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
exec "$@"
""",
    }
    if not multi_user:
        shims["useradd"] = """#!/bin/sh
for last; do :; done
if grep -q "^$last:" /etc/passwd; then echo "useradd: user '$last' already exists" >&2; exit 9; fi
n=$(wc -l < /etc/passwd)
echo "$last:x:$((n + 1000)):$((n + 1000))::/home/$last:/bin/sh" >> /etc/passwd
mkdir -p /home/"$last"
"""
        shims["chown"] = """#!/bin/sh
for a; do case "$a" in -*) ;; *) owner=${a%%[:.]*}; break;; esac; done
grep -q "^$owner:" /etc/passwd && exit 0
echo "chown: invalid user: '$owner'" >&2; exit 1
"""
    for name, text in shims.items():
        path = bindir / name
        path.write_text(text)
        path.chmod(0o755)
