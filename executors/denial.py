"""Did a sandboxed command hit its policy?  (``SandboxFacts.denied``)

A run counts as *denied* only when all of these hold:

1. it failed (a non-zero exit code; never on exit 0, never for a signal);
2. its output (stderr, then stdout, since ``2>&1`` is common) has a line with
   the text of EACCES, EPERM, EROFS or EBUSY in any common style,
   case-insensitively: ``Permission denied`` (coreutils, bash, Python, Go,
   Rust's ``os error 13``), ``Operation not permitted``, ``Read-only file
   system``, ``Device or resource busy`` (a rename over a protected path's
   read-only mount point), or Node's ``EACCES:`` / ``EROFS:`` / ``EPERM:`` codes;
3. that line names a path (quoted, or the ``prog: PATH: error`` field, or Go's
   ``op PATH: error``; for a bare error line such as Rust's ``Permission denied
   (os error 13)``, a quoted path on one of the few lines before it), and the
   policy forbids the path: not writable under the mode (outside every writable
   root, or inside a protected / read-only path) or hidden;
4. the host itself would have allowed writing there (the path, or its first
   existing ancestor, passes ``os.access(W_OK)``), or the path is hidden.  So a
   plain ``Permission denied`` the host gives anyway (``/etc/shadow`` for a
   normal user, a ``chmod 000`` file) is the command's own failure, not the
   sandbox's.

Which path: a line may name a source and a target (``cannot copy 'A' to 'B'``,
Go's ``rename A B``).  A hidden path is refused on reading, so it wins; else the
write target is the last forbidden path on the line, not the template or file
it was read from.  Not file denials at all: a command that could not be
executed (exit 126/127: nothing was written, only a hidden program counts), a
refused ``socket()`` (``bash: socket: Permission denied``; bash's ``/dev/tcp``)
-- the network, not a file.

What was refused: a path that does not exist yet was being created, and
``Read-only file system`` or a write verb on the line (``cannot create``,
``could not lock``, ``mkdir``...) says a write; either is a ``write``.  A
program that only reads (``cat: X: ...``) names a ``read``; a refused kernel
interface under ``/proc`` or ``/sys`` with neither is an ``access`` (a read of
another process's ``/proc/PID/environ`` is refused whatever the mode).  Only a
write the mode forbids and a hidden path are lifted by a wider mode
(``Denial.escalates``); the others are reported but never offered one.

Where the path comes from: the error's own line (or, for a bare error line,
the quoted path of a line just before it), never a traceback frame
(``File "/usr/lib/python3.11/socket.py", line 232``) and never a quoted text
that is itself the error (``"Permission denied"``).  Python names the file in
the error when there is one, so a bare ``PermissionError: [Errno 13] ...`` is
no file's denial (a refused ``socket()`` or semaphore: ``dsh.executors.refusal``).

Consequences, on purpose: the word "sandbox" in a path, ``false``, or a
message without a path are never a denial; a ``Permission denied`` on a path
the policy lets the command write (e.g. a ``chmod 000`` file in the workspace)
is not a denial either, because the policy did not cause it.  Evidence is
textual: a command that prints a fake denial line for a forbidden path and
exits non-zero is reported as denied.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

ERROR_TEXTS: tuple[str, ...] = (
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    # A protected path is a read-only mount point (bwrap, docker): renaming a
    # new file over it (git's config.lock -> config) or removing it is EBUSY.
    "Device or resource busy",
)
_ERROR_RE = LazyPattern(
    "|".join(re.escape(t) for t in ERROR_TEXTS) + r"|\b(?:EACCES|EPERM|EROFS|EBUSY)\b",
    re.IGNORECASE,
)
# Quoted names: 'x', "x", `x', `x` (Rust), and the typographic quotes of UTF-8 locales.
_QUOTED_RE = LazyPattern(
    r"'([^'\n]+)'|\"([^\"\n]+)\"|`([^`'\n]+)[`']|‘([^’\n]+)’|“([^”\n]+)”"
)
#: How far back a bare error line (no path on it) looks for the path it is about.
_CONTEXT_LINES = 3
#: Exit statuses of a command that could not be executed: nothing was written.
_NOT_EXECUTED = (126, 127)
#: bash's network pseudo-paths: a refused one is a connection, not a file.
_NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
_NEVER_DENIED = ("/dev/null",)
#: Only the start of a long output is scanned: the evidence of a failed write
#: comes early and a run's facts must stay cheap.
MAX_SCAN_LINES = 2000


Kind = Literal["write", "read", "access"]


@dataclass(frozen=True)
class Denial:
    """The evidence: the forbidden path and the error text on that line."""

    path: str
    error: str
    line: str
    #: "write" (the path is not writable under the mode), "read" (a hidden path,
    #: or a program that only reads) or "access" (a kernel interface, operation unknown).
    kind: Kind = "write"
    #: Would a wider mode allow it?  Only a forbidden write and a hidden path.
    escalates: bool = True


#: A Python traceback frame: the file named there is code that ran, not a file it was refused.
_FRAME_RE = LazyPattern(r'^\s*File "[^"\n]*", line \d+')
#: Python's error line without a file name: Python names the file when there is one.
_BARE_PY_ERROR_RE = LazyPattern(r"^\s*\w+(?:Error|Exception)\b[^'\"`]*\[Errno \d+\][^'\"`]*$")
#: A write on the line: creating, locking, removing, renaming, opening for writing.
_WRITE_VERB = (
    r"\b(?:cannot|could not|couldn't|unable to|failed to|can't)\s+(?:create|touch|remove|make|move|"
    r"overwrite|write|lock|link|symlink|unlink|rename|copy|open\b[^\n]*\bfor writing|delete|truncate|save)"
    r"|\b(?:mkdir|rmdir|rename|unlink|symlink|creat|write|chmod|chown|utime|truncate)\b"
    r"|\bO_(?:WRONLY|RDWR|CREAT)\b|\bfor writing\b"
)
#: A program that only reads what it names: ``cat: /proc/1/environ: Permission denied``.
_READ_ONLY_PROGRAM = (
    r"^(?:\S*/)?(?:cat|head|tail|less|more|grep|egrep|fgrep|wc|od|xxd|hexdump|strings|md5sum|sha1sum|"
    r"sha256sum|sha512sum|cksum|diff|cmp|sort|uniq|base64|file|stat|ls|readlink|du|find):\s"
    r"|\bfor reading\b"
)


@functools.cache
def _operation_res() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Compiled on the first refusal only: ``run -- true`` must not pay for them."""
    return re.compile(_WRITE_VERB, re.IGNORECASE), re.compile(_READ_ONLY_PROGRAM)


#: Kernel interfaces: a refusal there is not a write unless the line says so.
_KERNEL_TREES = ("/proc/", "/sys/")


def find_denial(
    policy: SandboxPolicy,
    *,
    exit_code: int | None,
    outputs: tuple[str, ...],
    workdir: str,
) -> Denial | None:
    """The first evidence that the policy refused a path a wider mode would
    allow (a write, a hidden path), or ``None``: what ``SandboxFacts.denied`` is."""
    found = find_path_refusals(policy, exit_code=exit_code, outputs=outputs, workdir=workdir)
    return next((d for d in found if d.escalates), None)


def find_path_refusals(
    policy: SandboxPolicy,
    *,
    exit_code: int | None,
    outputs: tuple[str, ...],
    workdir: str,
) -> list[Denial]:
    """Every refused path the output names that the policy may have caused, in
    order (at most one per line): writes and hidden paths, and the reads and
    kernel-interface accesses no wider mode allows."""
    if exit_code is None or exit_code == 0 or not policy.constrained:
        return []
    reads_only = exit_code in _NOT_EXECUTED
    found: list[Denial] = []
    for text in outputs:
        lines = text.splitlines()[:MAX_SCAN_LINES]
        for index, line in enumerate(lines):
            match = _ERROR_RE.search(line)
            if match is None or _FRAME_RE.match(line):
                continue
            candidates = path_candidates(line, match.start())
            if not candidates and not _BARE_PY_ERROR_RE.match(line):
                candidates = _context_candidates(lines[max(0, index - _CONTEXT_LINES) : index])
            blamed = _blame(policy, candidates, workdir, reads_only=reads_only)
            if blamed is not None:
                path, kind = blamed
                if kind == "write":
                    kind = _operation(line, match.group(0), path)
                escalates = kind == "write" or _hidden(policy, path)
                found.append(Denial(path, match.group(0), line, kind, escalates=escalates))
    return found


def _operation(line: str, error: str, path: str) -> Kind:
    """What a refusal on an unwritable path was: a write unless the line says
    otherwise (a reading program) or it is a kernel interface with no write word."""
    if error.lower() in ("read-only file system", "erofs") or not os.path.lexists(path):
        return "write"
    write_verb, read_only_program = _operation_res()
    if write_verb.search(line):
        return "write"
    if read_only_program.search(line):
        return "read"
    if path.startswith(_KERNEL_TREES):
        return "access"
    return "write"


def _hidden(policy: SandboxPolicy, path: str) -> bool:
    return _under(path, policy.hidden_paths)


def _blame(
    policy: SandboxPolicy, candidates: list[str], workdir: str, *, reads_only: bool
) -> tuple[str, Kind] | None:
    """The path the policy refused among a line's candidates (in line order):
    a hidden one first (reading it failed), else the last unwritable one (the
    write target comes after its source: ``copy A to B``, ``rename A B``)."""
    write: str | None = None
    for candidate in candidates:
        path = _absolute(candidate, workdir)
        if path is None or path.startswith(_NETWORK_PATHS):
            continue
        kind = _policy_caused(policy, path)
        if kind == "read":
            return path, kind
        if kind == "write" and not reads_only:
            write = path
    return (write, "write") if write is not None else None


def _context_candidates(before: list[str]) -> list[str]:
    """Quoted paths on the nearest earlier line that has any (Rust's
    ``failed to create file `/x``` ... ``Permission denied (os error 13)``),
    never a traceback frame's file: the code that ran is not what was refused."""
    for line in reversed(before):
        if _FRAME_RE.match(line):
            return []
        found = [name for _, name in _quoted(line) if _looks_like_path(name, quoted=True)]
        if found:
            return found
    return []


def _quoted(line: str) -> list[tuple[int, str]]:
    return [(m.start(), next(g for g in m.groups() if g is not None)) for m in _QUOTED_RE.finditer(line)]


def path_candidates(line: str, error_at: int) -> list[str]:
    """Path-like names on an error line, in line order: quoted ones and the
    field before the error text (``bash: line 1: /etc/x: Permission denied``,
    Go's ``open /etc/x: permission denied``)."""
    found = [(at, name) for at, name in _quoted(line) if _looks_like_path(name, quoted=True)]
    head = line[:error_at].rstrip()
    if head.endswith(":"):
        fields = head[:-1].split(": ")
        name = fields[-1].strip()
        at = head.rfind(name)
        if not _looks_like_path(name, quoted=False):
            # ``sh: 1: cannot create /etc/x: ...``: the path is the field's last word.
            name = name.split()[-1] if name.split() else ""
            at = head.rfind(name)
            # A relative word counts only with a directory in it (git's
            # ``could not lock config file .git/config``), never a bare word.
            relative = "/" in name.strip("/") and not any(q in name for q in "'\"`‘’“”")
            if not name.startswith(("/", "./", "../", "~")) and not relative:
                name = ""
        if name and name not in (n for _, n in found):
            found.append((at, name))
    return [name for _, name in sorted(found)]


def _looks_like_path(name: str, *, quoted: bool) -> bool:
    if not name or name.startswith("[Errno") or "\x00" in name:
        return False
    if _ERROR_RE.search(name):
        return False  # the quoted text is the error itself ("Permission denied")
    if name.startswith(("/", "./", "../", "~")):
        return True
    if quoted:
        return True
    # An unquoted field with spaces is prose ("connect to host x port 22"); one
    # without a slash or a dot is a word ("Error", "socket", "fatal"), not a file.
    return not any(c.isspace() for c in name) and ("/" in name or "." in name)


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


def _policy_caused(policy: SandboxPolicy, path: str) -> Kind | None:
    if _under(path, policy.hidden_paths):
        return "read"
    if not writable_under(policy, path) and _host_allows_write(path):
        return "write"
    return None


_ACTIONS: dict[Kind, str] = {"write": "write to", "read": "read of", "access": "access to"}


def hint(denial: Denial, mode: SandboxMode) -> str:
    """The one-line CLI hint, e.g. ``write to /etc/x denied under workspace-write``."""
    return f"{_ACTIONS[denial.kind]} {denial.path} denied under {mode}"
