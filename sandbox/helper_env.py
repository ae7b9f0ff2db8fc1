"""The environment of the processes a runner starts on the host around a command.

To set a sandbox up, runners start helpers on the host: ``unshare`` and the
namespace tool itself (as the caller: root in CI), ``prlimit``, ``timeout``,
``setpriv``, a cgroup-joining shell, keepers and watchdogs.  Each helper's dynamic loader
and C library read the environment before the helper does anything: a
``LD_PRELOAD`` or ``LD_LIBRARY_PATH`` naming a writable root runs a library an
earlier sandboxed run planted there, outside the sandbox, with the helper's
privileges.  ``GCONV_PATH``, ``LOCPATH``, ``GLIBC_TUNABLES``, ``BASH_ENV`` and
``PYTHON*`` are of the same kind, and a list of names to drop would miss the
next one.  So a helper starts with this fixed environment, and the command's
own variables are handed to the command by the last hop before it (an
option of the namespace tool, or a shell that reads them from a sealed memfd).
"""

from __future__ import annotations

#: The search path of helpers (they are named by absolute path; this serves
#: the shells among them and the programs they start in turn).
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def helper_env(**extra: str) -> dict[str, str]:
    """The whole environment of a host-side helper, plus ``extra`` (trusted values only)."""
    return {"PATH": SAFE_PATH, "LANG": "C", **extra}
