"""The session CA bundle of an allowlist with secrets, for Landlock.

A Landlock command has no mount namespace: it reads the bundle where the host
keeps it.  The bundle is written once per allowlist, 0444, in a directory of
its own that the host makes (``mkdtemp``: a fresh name, 0700 until the file is
in, then 0755) under ``/var/tmp``; outside every writable root, so the command
can read it and change nothing.  It holds certificates only (the session CA's
key stays in the proxy).  Removed when the runner closes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading


class BundleFiles:
    """One bundle file per allowlist (keyed by the bundle's bytes: one session CA each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: dict[bytes, str] = {}

    def environment(self, placeholders: dict[str, str], bundle: bytes) -> dict[str, str]:
        """The command's variables under secrets: each placeholder, and the CA variables."""
        from dsh.sandbox.net_secrets import ca_environment  # only a policy with secrets pays for it

        return {**placeholders, **ca_environment(self.path(bundle))}

    def path(self, bundle: bytes) -> str:
        """The file holding ``bundle``, written on first use.  Write it before the
        Landlock rules are built: they grant what exists then."""
        with self._lock:
            path = self._paths.get(bundle)
            if path is None:
                path = _write(bundle)
                self._paths[bundle] = path
            return path

    def close(self) -> None:
        with self._lock:
            paths, self._paths = list(self._paths.values()), {}
        for path in paths:
            with contextlib.suppress(OSError):
                shutil.rmtree(os.path.dirname(path))


#: The bundle directories' names: the prefix, then the owner's pid and start
#: time, so that ``prune_bundles`` knows a live session's from a leftover.
_PREFIX = "dsh-sandbox-ca-"


def _base() -> str:
    return "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()


def prune_bundles(*, everything: bool = False) -> list[str]:
    """Remove this user's bundle directories whose owner process is gone (a
    session killed before its runner closed); every one with ``everything``.
    The paths removed."""
    from dsh.runners.linux.orphans import start_time

    removed = []
    base = _base()
    with contextlib.suppress(OSError):
        # The name first: the base is the shared temporary directory, full of others' files.
        for name in sorted(n for n in os.listdir(base) if n.startswith(_PREFIX)):
            path = os.path.join(base, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            pid, _, rest = name.removeprefix(_PREFIX).partition("-")
            started = rest.partition("-")[0]
            alive = pid.isdigit() and str(start_time(int(pid))) == started
            if alive and not everything:
                continue
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.lexists(path):
                removed.append(path)
    return removed


def _write(bundle: bytes) -> str:
    from dsh.runners.linux.orphans import start_time
    from dsh.sandbox.own_dirs import write_new

    directory = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-{start_time(os.getpid())}-", dir=_base())
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            write_new(dir_fd, "ca-bundle.pem", bundle, 0o444)
            os.fchmod(dir_fd, 0o755)
        finally:
            os.close(dir_fd)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return os.path.join(directory, "ca-bundle.pem")
