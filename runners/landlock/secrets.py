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


def _write(bundle: bytes) -> str:
    directory = tempfile.mkdtemp(prefix="dsh-sandbox-ca-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open("ca-bundle.pem", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444,
                         dir_fd=dir_fd)
            try:
                view = memoryview(bundle)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, 0o444)  # whatever the umask
            finally:
                os.close(fd)
            os.fchmod(dir_fd, 0o755)
        finally:
            os.close(dir_fd)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return os.path.join(directory, "ca-bundle.pem")
