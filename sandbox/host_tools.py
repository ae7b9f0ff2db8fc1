"""Where the programs a runner starts on the host come from.

``unshare``, ``bwrap``, ``prlimit``, ``setpriv``, ``timeout`` and the shells
that join a cgroup or hand a command its environment run on the host, outside
the sandbox, with the caller's privileges (root in CI).  Looked up through the
caller's ``PATH``, an activated project virtualenv (``$WS/.venv/bin`` first on
``PATH``), a ``node_modules/.bin`` or a ``.`` entry would pick a file an earlier
sandboxed run planted in the workspace: it would run unsandboxed and unreported.

So helpers come from a fixed system search path only, never the caller's.
``/usr/local`` is left out: a profile may make it (or a directory under it) a
writable root, and a package manager installs the real tools in ``/usr``.  A
helper that still lies in, or resolves (through a link) into, a directory a
sandboxed command may write is refused, naming it: the run fails closed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import path_within

#: Where host-side helpers are looked up: system directories only.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def system_tool(name: str) -> str | None:
    """The absolute path of helper ``name`` on the system search path, or None.

    A name with a slash (an explicit option such as the bwrap runner's
    ``bwrap = "/opt/bwrap"``) is taken as given when absolute; a relative one
    would depend on the caller's directory and is never found.
    """
    if "/" in name:
        return name if os.path.isabs(name) and os.access(name, os.X_OK) and os.path.isfile(name) else None
    return shutil.which(name, path=SYSTEM_PATH)


def refuse_writable_helpers(helpers: Iterable[str | None], roots: Iterable[Path | None], *, runner: str) -> None:
    """Raise ``SandboxUnavailable`` if a helper lies in or resolves into a root.

    ``roots``: every directory a sandboxed command may write, in this run or
    an earlier one (the workspace, writable roots, the sandbox HOME, private
    tmp).  Both the path as named and its real path are checked: a link in
    ``/usr/bin`` to a workspace file runs that file.
    """
    dirs = [os.path.realpath(r) for r in roots if r is not None]
    for helper in helpers:
        if helper is None:
            continue
        for candidate in (os.path.abspath(helper), os.path.realpath(helper)):
            for root in dirs:
                if path_within(candidate, root):
                    raise SandboxUnavailable(
                        f"host-side helper {helper} lies in {root}, where a sandboxed command may write: "
                        f"an earlier run could have replaced it, and it would run on the host unsandboxed; "
                        f"install it in {SYSTEM_PATH.replace(':', ', ')} outside every writable root",
                        runner=runner,
                    )


def policy_roots(policy: SandboxPolicy) -> tuple[Path | None, ...]:
    """The directories of ``policy`` a sandboxed command may write.

    The workspace counts through ``writable_roots`` only: a read-only run may
    start in ``/`` (workspace-write refuses a workspace holding a system
    directory, so no earlier run could have written the system search path).
    """
    return (*policy.writable_roots, policy.home, policy.private_tmp)
