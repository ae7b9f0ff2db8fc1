"""The sandbox side of the envd test double: root directory, users, processes.

See ``envd_server`` for what the double is (and is not).
"""

from __future__ import annotations

import os
import queue
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from e2b.envd.process import process_pb
from protobuf import Oneof

_CHUNK = 32 << 10
_GO_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGKILL: "killed", signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupt", signal.SIGHUP: "hangup"}


def oneof(field: str, value: Any) -> Any:
    """``Oneof`` with a runtime field name (its stubs want a literal)."""
    return Oneof(field, value)


class EnvdDouble:
    """The sandbox state: the root directory, its users and running processes."""

    def __init__(self, root: Path, *, sudoers: tuple[str, ...], keepalive_s: float) -> None:
        self.root = root.resolve()
        self.keepalive_s = keepalive_s
        self.procs: dict[int, _Proc] = {}
        self.lock = threading.Lock()
        self.sudoers = sudoers
        self.expired = False
        self.shims = self.root / ".envd-double/bin"
        self._init_root()

    def _init_root(self) -> None:
        for d in ("etc", "root", "home/user", "tmp"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        passwd = self.root / "etc/passwd"
        if not passwd.exists():
            passwd.write_text("root:x:0:0::/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n")
        (self.root / "etc/sudoers-double").write_text("".join(f"{u}\n" for u in self.sudoers))
        self.shims.mkdir(parents=True, exist_ok=True)
        write_shims(self.shims, self.root)

    def expire(self) -> None:
        """The sandbox is killed (past its lifetime): its processes die and E2B's
        proxy answers 502 "... was not found" until a new sandbox is created,
        which in debug mode shows as the next ``/health`` (see ``revive``)."""
        self.kill_all()
        self.expired = True

    def revive(self) -> None:
        """A newly created sandbox: a fresh machine in the same root."""
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        self._init_root()
        self.expired = False

    def host_path(self, path: str, user: str) -> Path:
        """Map a sandbox path (absolute, or relative to the user's home) into root."""
        if not path.startswith("/"):
            path = f"{self.home(user)}/{path}"
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ConnectError("invalid_argument", f"path {path!r} has '..'")
        return self.root.joinpath(*parts) if parts else self.root

    def home(self, user: str) -> str:
        for line in (self.root / "etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) >= 6 and fields[0] == user:
                return fields[5]
        raise ConnectError("invalid_argument", f"user {user!r} does not exist in the sandbox")

    def spawn(self, config: Any, user: str, stdin: bool, timeout_ms: int | None) -> _Proc:
        cwd = self.host_path(config.cwd or self.home(user), user)
        if not cwd.is_dir():
            raise ConnectError("invalid_argument", f"cwd '{config.cwd}' does not exist")
        env = {"PATH": f"{self.shims}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               "HOME": str(self.host_path(self.home(user), user)), "USER": user,
               "LOGNAME": user, **dict(config.envs or {})}
        try:
            popen = subprocess.Popen(  # envd does not start a new process group either
                [config.cmd, *config.args], cwd=cwd, env=env,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise ConnectError("invalid_argument", f"error starting process: {exc}") from exc
        proc = _Proc(popen, timeout_ms)
        with self.lock:
            self.procs[popen.pid] = proc
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


class _Proc:
    """One started process: a pump thread turns its pipes and exit into events."""

    def __init__(self, popen: subprocess.Popen[bytes], timeout_ms: int | None) -> None:
        self.popen = popen
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
        if not self.ended.is_set():
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def _pump(self) -> None:
        assert self.popen.stdout is not None and self.popen.stderr is not None
        sel = selectors.DefaultSelector()
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
                chunk = os.read(key.fd, _CHUNK)
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
        for pipe in (self.popen.stdout, self.popen.stderr, self.popen.stdin):
            if pipe is not None:
                pipe.close()
        self.ended.set()
        self.events.put(_end(returncode))


def _read_nonblocking(fd: int) -> bytes:
    try:
        return os.read(fd, _CHUNK)
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


def write_shims(bindir: Path, root: Path) -> None:
    """User-management commands acting on the double's own passwd list."""
    passwd = shlex.quote(str(root / "etc/passwd"))
    home = shlex.quote(str(root / "home"))
    sudoers = shlex.quote(str(root / "etc/sudoers-double"))
    shims = {
        "useradd": f"""#!/bin/sh
for last; do :; done
if grep -q "^$last:" {passwd}; then echo "useradd: user '$last' already exists" >&2; exit 9; fi
n=$(wc -l < {passwd})
echo "$last:x:$((n + 1000)):$((n + 1000))::/home/$last:/bin/sh" >> {passwd}
mkdir -p {home}/"$last"
""",
        "chown": f"""#!/bin/sh
for a; do case "$a" in -*) ;; *) owner=${{a%%[:.]*}}; break;; esac; done
grep -q "^$owner:" {passwd} && exit 0
echo "chown: invalid user: '$owner'" >&2; exit 1
""",
        "sudo": f"""#!/bin/sh
if ! grep -qx "$USER" {sudoers}; then echo "sudo: a password is required" >&2; exit 1; fi
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
exec "$@"
""",
    }
    for name, text in shims.items():
        path = bindir / name
        path.write_text(text)
        path.chmod(0o755)
