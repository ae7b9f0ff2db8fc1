"""An allowlist's secrets for docker: the bundle file, the placeholders, the proxy's keys.

The session's values (from this process's environment) and its CA live in the
host's proxy.  The container gets the CA bundle (the system's CAs and the
session CA) as a 0444 file under ``/var/tmp/dsh-sandbox-<uid>`` (a 0700
directory of dsh-sandbox's own state, hidden from every run) bound read-only
at ``CA_BUNDLE_PATH``, and each secret's variable holding its placeholder.
Made before the container (its bind is part of it), removed with it.
"""

from __future__ import annotations

import contextlib
import os
import secrets as random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.sandbox.errors import ConfigError, DshError, SandboxUnavailable
from dsh.sandbox.net_rules import NetworkRules
from dsh.sandbox.net_secrets import CA_BUNDLE_PATH, Secrets, SessionCA, ca_environment
from dsh.sandbox.own_dirs import OwnDir, open_own_dir, write_new


@dataclass
class ContainerSecrets:
    secrets: Secrets
    ca: SessionCA
    directory: OwnDir  # held open until the file is removed
    name: str  # the bundle's file in it
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _removed: bool = False

    @property
    def bundle(self) -> Path:
        return self.directory.path / self.name

    def environment(self) -> dict[str, str]:
        """The command's variables: each placeholder, and the CA variables."""
        return {**self.secrets.environment(), **ca_environment(CA_BUNDLE_PATH)}

    def mount(self) -> Any:
        """The read-only bind of the bundle (a docker SDK ``Mount``)."""
        from docker.types import Mount  # type: ignore[import-untyped]

        return Mount(CA_BUNDLE_PATH, str(self.bundle), type="bind", read_only=True)

    def remove(self) -> None:
        """Remove the bundle and close the directory; once (a second call does
        nothing, so it never closes an fd number reused meanwhile)."""
        with self._lock:
            if self._removed:
                return
            self._removed = True
        with contextlib.suppress(OSError):
            os.unlink(self.name, dir_fd=self.directory.fd)
        self.directory.close()


def make_secrets(rules: NetworkRules, runner: str) -> ContainerSecrets:
    """The values, the CA and its bundle file for a container of ``rules``;
    ``SandboxUnavailable`` saying why not (nothing is left behind)."""
    try:
        secrets, ca = Secrets(rules.secrets, os.environ), SessionCA()
    except ConfigError as exc:
        raise SandboxUnavailable(f"{exc}; nothing ran", runner=runner) from None
    except ImportError as exc:
        raise SandboxUnavailable(f"secrets need the cryptography package ({exc}); install dsh-sandbox[secrets]; "
                                 "nothing ran", runner=runner) from None
    try:
        directory = open_own_dir(Path(f"/var/tmp/dsh-sandbox-{os.getuid()}"), "the session CA bundle",
                                 "make /var/tmp writable to you")
    except DshError as exc:
        raise SandboxUnavailable(f"{exc}; nothing ran", runner=runner) from None
    name = f"ca-bundle-{random.token_hex(8)}.pem"
    try:
        write_new(directory.fd, name, ca.bundle(), 0o444)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=directory.fd)
        directory.close()
        raise SandboxUnavailable(f"cannot write the session CA bundle in {directory.path}: {exc}; nothing ran",
                                 runner=runner) from None
    return ContainerSecrets(secrets, ca, directory, name)
