"""The session CA bundle of an allowlist with secrets, for bwrap.

The command trusts the proxy's session CA (and the system's CAs) through a
file bwrap makes from a sealed memory file (``--ro-bind-data``): read-only
inside, on no disk, and nothing on the host another process could swap.  The
command's variables get the placeholders and name the bundle; the values stay
in the host's proxy.
"""

from __future__ import annotations

import os

from dsh.runners.bwrap.environ import sealed_memfd
from dsh.sandbox.net_secrets import CA_BUNDLE_PATH, ca_environment


def sealed_bundle(bundle: bytes) -> int:
    """A sealed memory file holding ``bundle`` (``sealed_memfd``)."""
    return sealed_memfd("dsh-ca-bundle", bundle)


def bundle_args(fd: int) -> list[str]:
    """bwrap's arguments making ``CA_BUNDLE_PATH`` from ``fd``: a 0444 file on
    a read-only mount, in a directory of its own."""
    parent = os.path.dirname(CA_BUNDLE_PATH)
    return ["--perms", "0755", "--dir", parent, "--perms", "0444", "--ro-bind-data", str(fd), CA_BUNDLE_PATH]


def secret_environment(placeholders: dict[str, str]) -> dict[str, str]:
    """The command's variables under secrets: each placeholder, and the CA variables."""
    return {**placeholders, **ca_environment(CA_BUNDLE_PATH)}
