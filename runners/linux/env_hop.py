"""The last hop before a command: a shell that gives the command its environment.

Helpers in front of a command (the cgroup join shell, ``prlimit``,
``setpriv``, ``timeout``) start with ``dsh.sandbox.helper_env`` so that their
loaders never read the command's variables; this hop, the last process before
the command, swaps that fixed environment for the command's and ``exec``s the
argv unchanged.

The command's variables travel in a sealed memfd, never in an argv (argv is
readable by every user through ``/proc``): the hop sources it through
``/proc/self/fd/N`` (a new open of the memfd, at offset 0, which Landlock
allows: the memfd lives on no mounted filesystem).  The file is generated here:
``unset`` of each helper variable the command lacks, then ``export NAME='value'``
with single quotes, exact for every byte a value can hold (all but NUL).  A
name that is not a shell identifier cannot be exported by a POSIX shell and is
left out, as the cgroup join shell (dash) already drops it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from dsh.sandbox.helper_env import helper_env
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.lazy_pattern import LazyPattern

HOP_NAME = "dsh-env-hop"
_IDENTIFIER = LazyPattern(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Positional parameters: the memfd's number, then the argv.  A malformed
# number stops the run (125, like the join shell) instead of running the
# command with the helpers' environment.
SCRIPT = 'case $1 in ""|*[!0-9]*) exit 125;; esac; . "/proc/self/fd/$1" || exit 125; shift; exec "$@"'


def _quote(value: str) -> bytes:
    return b"'" + os.fsencode(value).replace(b"'", b"'\\''") + b"'"


def env_script(env: Mapping[str, str], fd: int) -> bytes:
    """The file the hop sources: the command's exact environment (identifier names), then fd closed."""
    lines = [b"unset " + k.encode() for k in helper_env() if k not in env]
    if "PATH" not in env:
        # Searched as execvp(3) does without PATH, and not exported.
        lines.append(b"PATH=" + os.defpath.encode())
    for name, value in env.items():
        if _IDENTIFIER.match(name):
            lines.append(b"export " + name.encode() + b"=" + _quote(value))
    lines.append(f"exec {fd}<&-".encode())
    return b"\n".join(lines) + b"\n"


def _shell(fd: int) -> str:
    # dash redirects fds 0-9 only; bash takes any (the script itself is POSIX).
    found = system_tool("sh" if fd <= 9 else "bash")
    if found is None:
        raise OSError("no shell (sh, or bash for fds above 9) to hand the command its environment")
    return found


class EnvHop:
    """One launch's hop: the memfd holding the command's environment, and the argv prefix."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.fd = os.memfd_create(HOP_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            self._write(env_script(env, self.fd))
            self.args: tuple[str, ...] = (_shell(self.fd), "-c", SCRIPT, HOP_NAME, str(self.fd))
        except BaseException:
            os.close(self.fd)
            raise

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        import fcntl

        # Sealed: nothing holding a copy of the fd can change what the hop reads.
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)

    def close(self) -> None:
        if self.fd != -1:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
