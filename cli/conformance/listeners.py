"""Host-side listeners the network scenarios aim at; each counts what reaches it.

Besides the fixed set opened per runner x mode, a scenario can open more unix
sockets of any type (stream, datagram, seqpacket; path, abstract or bound by a
relative path) before its run or while it runs, and a pseudo-terminal standing
in for the user's terminal.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

UNIX_KINDS = {"stream": socket.SOCK_STREAM, "dgram": socket.SOCK_DGRAM, "seqpacket": socket.SOCK_SEQPACKET}


class Listeners:
    """TCP (v4, v6), UDP, a DNS-shaped UDP port, an abstract and a path unix socket.

    Every accepted connection or received datagram increments a counter;
    ``reset()`` before a scenario, ``hits(name)`` after it.
    """

    def __init__(self, unix_dir: Path, nonce: str) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._paths: list[str] = []
        self.ports: dict[str, int] = {}
        self.abstract = f"dsh-conformance-{nonce}"
        self.unix_path = str(unix_dir / f"dshconf-{nonce[:8]}.sock")
        self._stream("tcp", socket.AF_INET, ("127.0.0.1", 0))
        with contextlib.suppress(OSError):  # a host without IPv6 just lacks the listener
            self._stream("tcp6", socket.AF_INET6, ("::1", 0))
        self._dgram("udp")
        self._dgram("dns")
        self._stream("abstract", socket.AF_UNIX, "\0" + self.abstract)
        self._stream("unix", socket.AF_UNIX, self.unix_path)
        os.chmod(self.unix_path, 0o777)  # reachable by an unprivileged sandboxed user too

    def _bump(self, name: str) -> None:
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + 1

    def _stream(self, name: str, family: int, addr: tuple[str, int] | str,
                kind: int = socket.SOCK_STREAM) -> None:
        sock = socket.socket(family, kind)
        sock.bind(addr)
        sock.listen(16)
        sock.settimeout(0.2)
        if family != socket.AF_UNIX:
            self.ports[name] = sock.getsockname()[1]
        self._socks.append(sock)

        def serve() -> None:
            while not self._stop.is_set():
                try:
                    conn, _ = sock.accept()
                except (TimeoutError, OSError):
                    continue
                self._bump(name)
                conn.close()

        threading.Thread(target=serve, name=f"conformance-{name}", daemon=True).start()

    def _dgram(self, name: str, family: int = socket.AF_INET, addr: tuple[str, int] | str = ("127.0.0.1", 0)
               ) -> None:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind(addr)
        sock.settimeout(0.2)
        if family != socket.AF_UNIX:
            self.ports[name] = sock.getsockname()[1]
        self._socks.append(sock)

        def serve() -> None:
            while not self._stop.is_set():
                try:
                    sock.recvfrom(4096)
                except (TimeoutError, OSError):
                    continue
                self._bump(name)

        threading.Thread(target=serve, name=f"conformance-{name}", daemon=True).start()

    def unix(self, name: str, kind: str, path: str, *, relative: bool = False) -> None:
        """Open one more counted unix socket ``name`` of ``kind`` at ``path``.

        ``path`` starting with NUL is abstract.  ``relative`` binds by the bare
        file name from inside its directory, the way many daemons do: the kernel
        then lists the socket under that relative name, not its full path.
        """
        addr = path
        if relative:
            directory, addr = os.path.split(path)
            fd = os.open(".", os.O_RDONLY)
            os.chdir(directory)
        try:
            if kind == "dgram":
                self._dgram(name, socket.AF_UNIX, addr)
            else:
                self._stream(name, socket.AF_UNIX, addr, UNIX_KINDS[kind])
        finally:
            if relative:
                os.fchdir(fd)
                os.close(fd)
        if not path.startswith("\0"):
            os.chmod(path, 0o777)
            self._paths.append(path)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    def hits(self, name: str) -> int:
        with self._lock:
            return self._counts.get(name, 0)

    def close(self) -> None:
        self._stop.set()
        for sock in self._socks:
            sock.close()
        for path in (self.unix_path, *self._paths):
            with contextlib.suppress(OSError):
                os.unlink(path)
