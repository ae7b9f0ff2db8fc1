"""The docker keeper: a runner's containers die within moments of the runner's process.

A container outlives the process that made it: nothing in Docker ties them.
So each runner starts one small process on the host that holds the read end of
a pipe whose only write end the runner keeps (close-on-exec: no command, no
helper inherits it).  The runner writes ``+<id>`` before a container starts and
``-<id>`` once it removed it.  When the runner's process exits -- normally, or
killed with SIGKILL, or by the OOM killer -- the pipe reaches EOF and the
keeper force-removes every container still listed (which kills everything
running in it) and the placeholders they alone used.

The keeper is out of the command's reach: the command runs in the container
(own pid namespace, no network, no daemon socket); the keeper runs on the host,
in its own session (a terminal's ^C does not reach it), ignores the catchable
termination signals and starts with the fixed helper environment plus the
caller's ``DOCKER_*`` connection settings and ``HOME``.  It is a few lines of Python that
load nothing else until EOF, and the Docker SDK only when a container is left.

If the keeper itself dies, containers whose owner is gone are removed by the
next run of the same user on this host (``reap_dead_owners``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading

from dsh.runners.pipe_keeper import start_keeper
from dsh.sandbox.helper_env import helper_env

#: The keeper's name on its command line (so a person can tell what it is).
KEEPER_NAME = "dsh-docker-keeper"
#: The caller's own settings (never a command's) the keeper needs to reach the
#: same daemon; HOME locates ``~/.docker`` certificates when no path is set.
CONNECTION_VARS = ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONFIG", "HOME")

def connection_env() -> dict[str, str]:
    """The fixed helper environment plus the caller's daemon settings: for every
    process this runner starts on the host (the keeper, ``docker`` for the bench)."""
    return helper_env(**{k: os.environ[k] for k in CONNECTION_VARS if k in os.environ})


_KEEPER = r"""
import os, signal, sys
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
ids = []
for line in sys.stdin.buffer:
    word = line.strip().decode("ascii", "replace")
    if word.startswith("+"):
        ids.append(word[1:])
    elif word.startswith("-") and word[1:] in ids:
        ids.remove(word[1:])
if ids:
    from dsh.runners.docker.keeper import purge
    purge(ids)
"""


def purge(ids: list[str]) -> None:
    """Force-remove the containers ``ids`` and the placeholders only they used."""
    from dsh.runners.docker import client as dc

    try:
        client = dc.connect()
    except Exception:
        return  # the daemon is gone: so are its containers' processes
    try:
        placeholders: list[str] = []
        for cid in ids:
            with contextlib.suppress(Exception):  # gone, or the daemon refused: try the rest
                labels = client.api.inspect_container(cid)["Config"]["Labels"] or {}
                if dc.remove_container(client, cid):
                    placeholders += dc.placeholders_of(labels)
        dc.remove_placeholders(client, placeholders)
    finally:
        client.close()


class DockerKeeper:
    """The runner's side: the keeper process and the pipe's write end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._write_fd = -1
        self._ids: list[str] = []

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        self._process, self._write_fd = start_keeper(_KEEPER, [KEEPER_NAME], connection_env())

    def _send(self, line: str) -> None:
        data = line.encode("ascii") + b"\n"
        if os.write(self._write_fd, data) != len(data):  # below PIPE_BUF: all or an error
            raise OSError("short write to the container keeper")

    def ensure_started(self) -> None:
        """Start the keeper ahead of the first container, so its start-up is over
        before the container starts (raises OSError if it cannot start)."""
        with self._lock:
            if self._write_fd == -1:
                self._start()
                for known in self._ids:
                    self._send("+" + known)

    def add(self, container_id: str) -> None:
        """Register a container before it starts (raises OSError if no keeper can hold it)."""
        with self._lock:
            if self._write_fd == -1:
                self._start()
                for known in self._ids:
                    self._send("+" + known)
            try:
                self._send("+" + container_id)
            except OSError:
                # The keeper died (killed by hand, OOM): a new one takes over the list.
                self._close_locked()
                self._start()
                for known in self._ids:
                    self._send("+" + known)
                self._send("+" + container_id)
            self._ids.append(container_id)

    def forget(self, container_id: str) -> None:
        """The container is removed: nothing to do for it at the end."""
        with self._lock:
            if container_id not in self._ids:
                return
            self._ids.remove(container_id)
            if self._write_fd != -1:
                with contextlib.suppress(OSError):
                    self._send("-" + container_id)

    def _close_locked(self) -> None:
        if self._write_fd != -1:
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = -1
        self._process = None  # it exits on its own at EOF; never waited for

    def close(self) -> None:
        """EOF for the keeper: it removes what is still listed and exits."""
        with self._lock:
            self._close_locked()
