"""Did a sandboxed command hit its policy?  (``SandboxFacts.denied``)

A run counts as *denied* only when all of these hold:

1. it failed (a non-zero exit code; never on exit 0, never for a signal);
2. its output (stderr, then stdout, since ``2>&1`` is common) has a line with
   the text of EACCES, EPERM or EROFS: ``Permission denied``,
   ``Operation not permitted``, ``Read-only file system``;
3. that line names a path (quoted, or the ``prog: PATH: error`` field), and the
   policy forbids the path: not writable under the mode (outside every writable
   root, or inside a protected / read-only path) or hidden;
4. the host itself would have allowed writing there (the path, or its first
   existing ancestor, passes ``os.access(W_OK)``), or the path is hidden.  So a
   plain ``Permission denied`` the host gives anyway (``/etc/shadow`` for a
   normal user, a ``chmod 000`` file) is the command's own failure, not the
   sandbox's.

Consequences, on purpose: the word "sandbox" in a path, ``false``, or a
message without a path are never a denial; a ``Permission denied`` on a path
the policy lets the command write (e.g. a ``chmod 000`` file in the workspace)
is not a denial either, because the policy did not cause it.  Evidence is
textual: a command that prints a fake denial line for a forbidden path and
exits non-zero is reported as denied.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

ERROR_TEXTS: tuple[str, ...] = (
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
)
_ERROR_RE = re.compile("|".join(re.escape(t) for t in ERROR_TEXTS))
# Quoted names: 'x', "x", `x', and the typographic quotes of UTF-8 locales.
_QUOTED_RE = re.compile(r"'([^'\n]+)'|\"([^\"\n]+)\"|`([^'\n]+)'|‘([^’\n]+)’|“([^”\n]+)”")
_NEVER_DENIED = ("/dev/null",)
#: Only the start of a long output is scanned: the evidence of a failed write
#: comes early and a run's facts must stay cheap.
MAX_SCAN_LINES = 2000


@dataclass(frozen=True)
class Denial:
    """The evidence: the forbidden path and the error text on that line."""

    path: str
    error: str
    line: str
    #: "write" (the path is not writable under the mode) or "read" (hidden path).
    kind: Literal["write", "read"] = "write"


def find_denial(
    policy: SandboxPolicy,
    *,
    exit_code: int | None,
    outputs: tuple[str, ...],
    workdir: str,
) -> Denial | None:
    """The first piece of evidence that the policy refused a path, or ``None``."""
    if exit_code is None or exit_code == 0 or not policy.constrained:
        return None
    for text in outputs:
        for count, line in enumerate(text.splitlines()):
            if count >= MAX_SCAN_LINES:
                break
            match = _ERROR_RE.search(line)
            if match is None:
                continue
            for candidate in path_candidates(line, match.start()):
                path = _absolute(candidate, workdir)
                kind = _policy_caused(policy, path) if path is not None else None
                if path is not None and kind is not None:
                    return Denial(path, match.group(0), line, kind)
    return None


def path_candidates(line: str, error_at: int) -> list[str]:
    """Path-like names on an error line: quoted ones first, then the field
    before the error text (``bash: line 1: /etc/x: Permission denied``)."""
    found: list[str] = []
    for m in _QUOTED_RE.finditer(line):
        name = next(g for g in m.groups() if g is not None)
        if _looks_like_path(name, quoted=True):
            found.append(name)
    head = line[:error_at].rstrip()
    if head.endswith(":"):
        fields = head[:-1].split(": ")
        name = fields[-1].strip()
        if not _looks_like_path(name, quoted=False):
            # ``sh: 1: cannot create /etc/x: ...``: the path is the field's last word.
            name = name.split()[-1] if name.split() else ""
            if not name.startswith(("/", "./", "../", "~")):
                name = ""
        if name and name not in found:
            found.append(name)
    return found


def _looks_like_path(name: str, *, quoted: bool) -> bool:
    if not name or name.startswith("[Errno") or "\x00" in name:
        return False
    if name.startswith(("/", "./", "../", "~")):
        return True
    # An unquoted field with spaces is prose ("connect to host x port 22").
    return quoted or not any(c.isspace() for c in name)


def _absolute(candidate: str, workdir: str) -> str | None:
    try:
        path = os.path.expanduser(candidate)
        if not os.path.isabs(path):
            path = os.path.join(workdir, path)
        # realpath: the policy's paths are canonical (symlinks resolved).
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _under(path: str, roots: tuple[Path, ...]) -> bool:
    for root in roots:
        r = str(root)
        if path == r or path.startswith(r.rstrip("/") + "/"):
            return True
    return False


def writable_under(policy: SandboxPolicy, path: str) -> bool:
    """May a command write ``path`` under ``policy``?"""
    if policy.mode is SandboxMode.DANGER_FULL_ACCESS or path in _NEVER_DENIED:
        return True
    if policy.mode is SandboxMode.READ_ONLY:
        return False
    if _under(path, policy.protected_paths) or _under(path, policy.read_only_paths):
        return False
    return _under(path, policy.writable_roots)


def _host_allows_write(path: str) -> bool:
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK)


def _policy_caused(policy: SandboxPolicy, path: str) -> Literal["write", "read"] | None:
    if _under(path, policy.hidden_paths):
        return "read"
    if not writable_under(policy, path) and _host_allows_write(path):
        return "write"
    return None


def hint(denial: Denial, mode: SandboxMode) -> str:
    """The one-line CLI hint, e.g. ``write to /etc/x denied under workspace-write``."""
    action = "read of" if denial.kind == "read" else "write to"
    return f"{action} {denial.path} denied under {mode}"
