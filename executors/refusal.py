"""What a failed sandboxed command met that no wider mode would grant: one line.

``dsh.executors.denial`` finds refused *paths*.  A failure can also come from
what the sandbox refuses that is not a file: a connection or a name lookup
under network-off, a ``socket(AF_UNIX)`` or a POSIX semaphore the runner
refuses (its ``limitations()``), a read of a kernel interface, or git failing
quietly on a read-only ``.git``.  Each gets one plain line saying what was
refused and, where one exists, the key or flag that allows it; none is a
*denial* (``SandboxFacts.denied``), so none offers a wider mode: asking for
``danger-full-access`` to open a socket is not what the person should grant.

Evidence is textual, like the denials, and claims only what the text shows:
a bare Python ``PermissionError`` whose traceback runs through ``socket.py``
is a refused socket, not a write to ``socket.py``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.executors.denial import ERROR_TEXTS, MAX_SCAN_LINES, Denial, find_path_refusals, hint
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.profiles import builtin_profile_names

RefusalKind = Literal["network", "unix-socket", "socket", "ipc", "path", "git", "file-status"]

#: A failed name lookup, an unreachable network or a refused connection, in the
#: common styles (glibc, curl, wget, Python/pip, Node, Go, git).  A refused
#: connection counts: with the network off the command has only its own
#: loopback (or none), so a proxy or service on the host's loopback, the usual
#: way out behind a corporate proxy, refuses every connection.
_NETWORK_RE = LazyPattern(
    r"Temporary failure in name resolution|Name or service not known|No address associated with hostname"
    r"|Could not resolve host|could not resolve proxy|getaddrinfo (?:ENOTFOUND|EAI_AGAIN)|\bEAI_AGAIN\b"
    r"|nodename nor servname provided|Network is unreachable|\bENETUNREACH\b|dial tcp: lookup "
    r"|Failed to establish a new connection|Connection refused|\bECONNREFUSED\b|Couldn't connect to server"
    r"|Failed to connect to ",
    re.IGNORECASE,
)
_DENIED_RE = LazyPattern("|".join(map(re.escape, ERROR_TEXTS)) + r"|\b(?:EACCES|EPERM)\b", re.IGNORECASE)
#: How far back from a bare error line its traceback or context is read.
_CONTEXT_LINES = 40
_UNIX_RE = LazyPattern(r"AF_UNIX|AF_LOCAL|\.sock\b|unix socket|UNIX domain|multiprocessing/(?:managers|connection)\.py")
_INET_RE = LazyPattern(r"AF_INET6?|create_connection|getaddrinfo|urllib|http\.client|requests/|/dev/tcp/|/dev/udp/")
_SOCKET_RE = LazyPattern(
    r"/socket\.py\"|\bsocket\(|\bsocket: |\bsocket\.socket\b|\b(?:listen|bind|connect) E(?:ACCES|PERM)\b"
)
_IPC_RE = LazyPattern(
    r"/synchronize\.py\"|/shared_memory\.py\"|\bSemLock\b|\bsem_open\b|\bshm_open\b|/dev/shm\b|\bmq_open\b"
)
#: coreutils' words when ``statx`` itself fails with EINVAL (a runner's kernel
#: that refuses a flag glibc passes): no file was refused, the call was.
_STAT_EINVAL_RE = LazyPattern(r"cannot (?:statx|stat|access) .*: Invalid argument\s*$")
#: git dir entries that stay read-only even with ``git = "commit"``.
_GIT_EXECUTION = ("hooks", "config", "config.lock", "info", "modules", "worktrees")
_GIT_WORD = LazyPattern(r"(?:^|[\s;&|(`])(?:\S*/)?git(?:\s|$)")


@dataclass(frozen=True)
class Refusal:
    """One thing the sandbox refused that a wider mode is not the answer to."""

    kind: RefusalKind
    line: str
    path: Denial | None = None  # for ``path``: the refused read or kernel access


def find_refusal(
    policy: SandboxPolicy,
    *,
    exit_code: int | None,
    outputs: tuple[str, ...],
    workdir: str,
    command: str = "",
) -> Refusal | None:
    """The first non-denial refusal the output shows, or ``None`` (exit 0, a
    signal, danger-full-access and unconstrained runs never have one)."""
    if exit_code is None or exit_code == 0 or not policy.constrained:
        return None
    for text in outputs:
        lines = text.splitlines()[:MAX_SCAN_LINES]
        for index, line in enumerate(lines):
            if not policy.network and _NETWORK_RE.search(line):
                return Refusal("network", line)
            if _STAT_EINVAL_RE.search(line):
                return Refusal("file-status", line)
            if not _DENIED_RE.search(line):
                continue
            # bash reports a refused /dev/tcp as ``socket: ...`` and then the path.
            context = "\n".join(lines[max(0, index - _CONTEXT_LINES) : index + 2])
            if _IPC_RE.search(context):
                return Refusal("ipc", line)
            if _SOCKET_RE.search(context) or "/dev/tcp/" in line or "/dev/udp/" in line:
                if _UNIX_RE.search(context):
                    return Refusal("unix-socket", line)
                if not policy.network and _INET_RE.search(context):
                    return Refusal("network", line)
                return Refusal("socket", line)
    paths = find_path_refusals(policy, exit_code=exit_code, outputs=outputs, workdir=workdir)
    if any(d.escalates for d in paths):
        return None  # a denial: the hint and the escalation say it
    if paths:
        return Refusal("path", paths[0].line, paths[0])
    if policy.git == "read-only" and _GIT_WORD.search(command) and read_only_git_dir(policy, workdir) is not None:
        return Refusal("git", "")
    return None


def read_only_git_dir(policy: SandboxPolicy, workdir: str) -> Path | None:
    """The protected git dir of the repository ``workdir`` is in, if any."""
    here = Path(workdir)
    for folder in (here, *here.parents):
        git = folder / ".git"
        if git in policy.protected_paths and os.path.lexists(git):
            return git
    return None


def git_key_hint(policy: SandboxPolicy, path: str) -> str:
    """For a denied write into a read-only git dir that ``git = "commit"`` would
    open (index, objects, refs, stash), the key that allows it; else ``""``."""
    if policy.git != "read-only":
        return ""
    for protected in policy.protected_paths:
        root = str(protected)
        if not path.startswith(root.rstrip("/") + "/"):
            continue
        if protected.name != ".git" and not (protected / "HEAD").exists():
            continue
        first = path[len(root) :].lstrip("/").split("/", 1)[0]
        if first not in _GIT_EXECUTION:
            return f'{protected} is read-only under this profile; git = "commit" in the profile allows commits'
    return ""


def describe(
    refusal: Refusal,
    policy: SandboxPolicy,
    *,
    runner: str | None,
    limitations: Mapping[str, str],
) -> str | None:
    """The one line for ``refusal`` (``None`` when nothing can be claimed:
    a refused socket on a runner that declares no such limitation is not
    known to be the sandbox's)."""
    mode = policy.mode
    profile = f"profile {policy.profile}" if policy.profile else f"{mode} mode"
    if refusal.kind == "network" and policy.network_allowlist is not None:
        return (
            f"the network is limited to an allowlist under {profile}: a name lookup or connection failed; "
            "only the proxy in HTTP_PROXY/HTTPS_PROXY/ALL_PROXY is reachable, and it resolves names itself; "
            "allow a host with --allow-domain HOST (or [network] allow in the profile)"
        )
    if refusal.kind == "network":
        return (
            f"the network is off under {profile}: a name lookup or connection failed; "
            "allow it with --network (or network = true in the profile)"
        )
    if refusal.kind in ("unix-socket", "socket", "ipc"):
        names = ("local-ipc", "posix-shm", "ipc") if refusal.kind == "ipc" else ("unix-sockets", "local-ipc")
        name = next((n for n in names if n in limitations), None)
        # A runner that refuses only unix sockets keeps the network off with a
        # namespace, not by refusing socket(): the refused one was a unix socket.
        kind = "unix-socket" if name == "unix-sockets" else refusal.kind
        network_off = kind == "socket" and not policy.network
        if name is None and not network_off:
            return None
        what = {"unix-socket": "a unix socket", "socket": "a socket", "ipc": "local IPC (a semaphore or /dev/shm)"}
        why = []
        if name is not None:
            shown = policy.profile or mode.value
            shown = shown if shown in builtin_profile_names() else "PROFILE"
            explain = f"dsh-sandbox profile explain {shown} --runner {runner}"
            why.append(f"the {runner or 'chosen'} runner refuses it (limitation {name}; `{explain}` says why)")
        if network_off:
            why.append(f"the network is off under {profile} (--network allows it)")
        return f"{what[kind]} was refused, not a file: " + "; ".join(why)
    if refusal.kind == "file-status":
        reason = limitations.get("file-status")
        if reason is None:
            return None
        return f"'Invalid argument' from stat is the {runner or 'chosen'} runner's limitation file-status: {reason}"
    if refusal.kind == "path" and refusal.path is not None:
        return hint(refusal.path, mode)
    if refusal.kind == "git":
        return (
            'git failed and .git is read-only under this profile (git = "read-only"): '
            'git = "commit" in the profile allows commit, add and stash (hooks and config stay read-only)'
        )
    return None
