"""The command's environment, handed over by bwrap itself.

``unshare``, ``bwrap`` and the limit wrappers start with the fixed
``helper_env`` (their loaders run on the host, as the caller).  bwrap is the
last hop: ``--args FD`` reads ``--clearenv`` and one ``--setenv NAME VALUE`` per
variable from a sealed memfd, after bwrap's own loader has run, and its child
``exec``s the command with exactly that environment (bwrap adds ``PWD`` for
``--chdir``).  The values never appear in an argv, which every user can read.

The mount arguments travel the same way: one bind per directory above a deep
protected path makes megabytes of paths, past what ``execve`` takes
(``E2BIG``); a memfd has no such limit.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping, Sequence

_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


def env_args(env: Mapping[str, str], before: Sequence[str] = ()) -> bytes:
    """NUL-separated bwrap arguments that replace bwrap's environment with
    ``env``, after ``before`` (the mount arguments)."""
    out = [os.fsencode(a) for a in before] + [b"--clearenv"]
    for name, value in env.items():
        if name and "=" not in name:  # setenv(3) refuses such names: bwrap would die
            out += [b"--setenv", os.fsencode(name), os.fsencode(value)]
    return b"\0".join(out) + b"\0"


def env_args_fd(env: Mapping[str, str], before: Sequence[str] = ()) -> int:
    """A sealed memfd (close-on-exec; pass it) holding ``env_args(env, before)``, at offset 0."""
    return sealed_memfd("dsh-bwrap-env", env_args(env, before))


def sealed_memfd(name: str, data: bytes) -> int:
    """A memory file holding ``data``, sealed against every change, at offset 0
    (bwrap reads it from there); close-on-exec until passed to the launch."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
