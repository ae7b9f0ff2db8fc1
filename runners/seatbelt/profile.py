"""SBPL (Seatbelt profile language) generation for a ``SandboxPolicy``.

Pure functions, testable on any platform.  No policy path is ever spliced into
the profile text: every path is a ``-DKEY=VALUE`` parameter of ``sandbox-exec``
referenced as ``(param "KEY")``.  The only policy-derived text in the profile
is a protected *name* regex, and only for names made of ``[A-Za-z0-9._-]``.

Rules, in order:

1. ``(deny default)``: nothing is allowed unless a rule says so.
2. processes (exec, fork, signals and process info within the sandbox) and the
   few services ordinary programs need to start (user lookup, preferences,
   sysctl reads, POSIX semaphores, ptys).
3. reads everywhere except the hidden paths (``require-not``), then the hidden
   paths denied again (read and write), for the same reason as in 4.
4. writes: ``/dev/null``; in workspace-write each writable root, each allow
   excluding the protected and read-only paths with ``require-not``; then
   explicit ``deny`` rules for the same paths.  Both are emitted so the result
   does not depend on how a macOS release orders allow and deny: whichever rule
   wins, a protected path stays read-only.  Protected paths are matched by
   ``literal`` (the path itself, existing or not), ``subpath`` (everything
   under it) and a name ``regex`` (a ``.git`` anywhere below a root, so one
   created later, or moved by renaming its parent, is covered too).
5. network: ``(deny network*)`` unless the policy allows it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy

#: macOS keeps these top-level directories as symlinks into ``/private``;
#: Seatbelt matches the resolved path, so rules must name the ``/private`` one.
PRIVATE_ALIASES = ("/var", "/tmp", "/etc")

_SAFE_NAME = LazyPattern(r"^[A-Za-z0-9._-]+$")


def macos_canonical(path: str | os.PathLike[str]) -> str:
    """``/tmp/x`` -> ``/private/tmp/x`` (likewise ``/var``, ``/etc``); else unchanged."""
    text = os.path.normpath(os.fspath(path))
    for alias in PRIVATE_ALIASES:
        if text == alias or text.startswith(alias + "/"):
            return "/private" + text
    return text


@dataclass(frozen=True)
class SeatbeltProfile:
    """The profile text and the ``-D`` parameters it references."""

    text: str
    params: tuple[tuple[str, str], ...]

    def define_args(self) -> list[str]:
        return [f"-D{key}={value}" for key, value in self.params]


class _Params:
    def __init__(self) -> None:
        self.items: dict[str, str] = {}

    def add(self, prefix: str, paths: Iterable[str]) -> list[str]:
        """Register ``paths`` (deduplicated, in order) as ``PREFIX_0``...; the keys."""
        keys = []
        for i, path in enumerate(dict.fromkeys(paths)):
            key = f"{prefix}_{i}"
            self.items[key] = path
            keys.append(key)
        return keys


BASE_RULES = """\
(version 1)
(deny default)

; processes: children inherit this profile
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))

; what ordinary programs need to start: user lookup, preferences, sysctl
; reads, POSIX semaphores (Python multiprocessing), pseudo-terminals
(allow user-preference-read)
(allow sysctl-read)
(allow mach-lookup (global-name "com.apple.system.opendirectoryd.libinfo"))
(allow ipc-posix-sem)
(allow pseudo-tty)
(allow file-read* file-write* file-ioctl (literal "/dev/ptmx"))
(allow file-ioctl (regex #"^/dev/ttys[0-9]+$"))
"""


def _matchers(keys: Iterable[str]) -> list[str]:
    out = []
    for key in keys:
        out += [f'(literal (param "{key}"))', f'(subpath (param "{key}"))']
    return out


def name_regexes(names: Iterable[str]) -> list[str]:
    """``(regex #"/\\.git(/|$)")`` for each safe protected name."""
    return [
        '(regex #"/' + re.sub(r"([.])", r"\\\1", name) + '(/|$)")'
        for name in sorted(set(names))
        if _SAFE_NAME.match(name) and name not in (".", "..")
    ]


def protected_names(policy: SandboxPolicy) -> list[str]:
    """Names of protected paths that sit directly in a writable root."""
    roots = {str(r) for r in policy.writable_roots}
    return [p.name for p in policy.protected_paths if str(p.parent) in roots]


def _block(head: str, lines: list[str], indent: str = "  ") -> str:
    if not lines:
        return ""
    return "(" + head + "\n" + "\n".join(indent + ln for ln in lines) + ")\n"


def build_profile(policy: SandboxPolicy) -> SeatbeltProfile:
    """The SBPL profile and parameters that enforce ``policy`` (a constraining mode)."""
    params = _Params()
    parts = [BASE_RULES]

    hidden = params.add("HIDDEN", (macos_canonical(p) for p in policy.hidden_paths))
    parts.append("\n; reads: everywhere but the hidden paths\n")
    if hidden:
        unread = [f"(require-not {m})" for m in _matchers(hidden)]
        parts.append("(allow file-read*\n  (require-all\n")
        parts.append("\n".join("    " + c for c in unread) + "))\n")
    else:
        parts.append("(allow file-read*)\n")
    parts.append(_block("deny file-read* file-write*", _matchers(hidden)))

    parts.append(
        '\n; writes\n(allow file-write-data (require-all (literal "/dev/null") (vnode-type CHARACTER-DEVICE)))\n'
    )
    writable = policy.writable_roots if policy.mode is SandboxMode.WORKSPACE_WRITE else ()
    roots = params.add("WRITABLE_ROOT", (macos_canonical(p) for p in writable))
    if roots:
        kept = params.add(
            "PROTECTED",
            (macos_canonical(p) for p in (*policy.protected_paths, *policy.read_only_paths)),
        )
        keep_rules = [*_matchers(kept), *name_regexes(protected_names(policy))]
        for root in roots:
            conditions = [f'(subpath (param "{root}"))', *(f"(require-not {m})" for m in keep_rules)]
            parts.append("(allow file-write*\n  (require-all\n")
            parts.append("\n".join("    " + c for c in conditions) + "))\n")
        parts.append("; protected and read-only paths, stated again after the allows\n")
        parts.append(_block("deny file-write*", keep_rules))

    parts.append("\n; network\n")
    parts.append("(allow network*)\n" if policy.network else "(deny network*)\n")
    return SeatbeltProfile("".join(parts), tuple(params.items.items()))
