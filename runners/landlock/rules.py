"""Which Landlock rules enforce a ``SandboxPolicy``, and what they cannot.

Pure planning (reads the filesystem to enumerate siblings, changes nothing):
``plan_rules(policy, abi, strategy)`` returns a ``RulePlan``; ``build_ruleset``
turns it into a ruleset fd.

Landlock only grants: a right given on a directory holds for everything
beneath it.  So a path that must be *less* accessible than its parent
(a hidden path under ``/``, a protected ``.git`` under a writable root) is
excluded by granting the right on each sibling along the way instead of on the
parent; the parents on the way ("ancestors") get only what is safe for them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.runners.landlock import abi
from dsh.sandbox import own_state
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import kept_paths
from dsh.sandbox.pins import PinnedPaths, open_beneath
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import is_within
from dsh.sandbox.runner import Gap

ProtectedStrategy = Literal["parent", "siblings"]

DEGRADE_PROTECTED = "landlock-protected-paths"
DEGRADE_HIDDEN = "landlock-hidden-metadata"
DEGRADE_HIDDEN_IN_ROOT = "landlock-hidden-paths"
DEGRADE_METADATA = "landlock-metadata"
DEGRADE_SCOPES = "landlock-no-scopes"
DEGRADE_TRUNCATE = "landlock-no-truncate"

# /dev is an allowlist: the rest of it (the caller's terminal and every other
# tty, /dev/console, disks that a uid-0 command could read raw around hidden
# paths, input devices, sound and video, the host's /dev/shm and mqueues) is
# not granted, whatever its permission bits.  /dev/null is the only path
# writable in read-only mode.  An interactive run would grant a terminal; no
# policy asks for one yet.
_DEV = Path("/dev")
_DEV_NULL = _DEV / "null"
_DEV_READABLE = tuple(_DEV / name for name in ("zero", "full", "random", "urandom"))


@dataclass(frozen=True)
class PathRule:
    path: Path
    rights: int


@dataclass(frozen=True)
class RulePlan:
    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    rules: tuple[PathRule, ...]
    dropped: tuple[str, ...]  # rights/scopes the running ABI lacks
    gaps: tuple[Gap, ...]
    notes: tuple[str, ...]  # side effects worth knowing, not enforcement gaps

    def describe_rules(self) -> tuple[str, ...]:
        lines = []
        for rule in self.rules:
            names = abi.names_of(abi.FS_RIGHTS, rule.rights)
            lines.append(f"{rule.path} -> {'|'.join(names) if names else '(none)'}")
        return tuple(lines)


def split_tree(root: Path, excluded: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Cover ``root`` minus ``excluded``: (paths to grant, ancestors of exclusions).

    Every real path beneath ``root`` is either beneath a granted path, an
    ancestor (gets only what is safe), or excluded.  Symlinks get no rule: what
    they point to is covered (or excluded) in its own place.

    Linear in the exclusions: a run hides every other workspace's sandbox HOME,
    hundreds of siblings in one directory for a long-time user.
    """
    top = str(root)
    names = [str(ex) for ex in excluded]
    if any(top == ex or top.startswith(ex.rstrip("/") + "/") for ex in names):
        return [], []
    prefix = top.rstrip("/") + "/"
    return _split(top, [ex for ex in names if ex.startswith(prefix)])


def _split(root: str, inside: list[str]) -> tuple[list[Path], list[Path]]:
    """``split_tree`` of ``root`` with ``inside`` all strictly beneath it."""
    if not inside:
        return [Path(root)], []
    prefix = root.rstrip("/") + "/"
    excluded_here: set[str] = set()
    deeper: dict[str, list[str]] = {}
    for ex in inside:
        name, _, rest = ex[len(prefix):].partition("/")
        if rest:
            deeper.setdefault(name, []).append(ex)
        else:
            excluded_here.add(name)
    granted: list[Path] = []
    ancestors: list[Path] = [Path(root)]
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return granted, ancestors  # unlistable: grant nothing beneath (fail safe)
    for entry in entries:
        if entry.is_symlink() or entry.name in excluded_here:
            continue
        sub_granted, sub_ancestors = _split(entry.path, deeper.get(entry.name, []))
        granted += sub_granted
        ancestors += sub_ancestors
    return granted, ancestors


class _Rules:
    """Accumulates rights per path (Landlock unions the rules of a path)."""

    def __init__(self, supported_fs: int) -> None:
        self.supported = supported_fs
        self.by_path: dict[Path, int] = {}

    def grant(self, paths: Iterable[Path], rights: int) -> None:
        for path in paths:
            # A non-directory only takes file rights (the kernel rejects the rest).
            allowed = rights & self.supported
            if not os.path.isdir(path):
                allowed &= abi.FS_FILE_RIGHTS
            if allowed:
                self.by_path[path] = self.by_path.get(path, 0) | allowed


def plan_rules(policy: SandboxPolicy, abi_version: int, strategy: ProtectedStrategy = "parent") -> RulePlan:
    supported_fs = abi.rights_for_abi(abi.FS_RIGHTS, abi_version)
    handled_net = 0 if policy.network else abi.rights_for_abi(abi.NET_RIGHTS, abi_version)
    scoped = abi.rights_for_abi(abi.SCOPES, abi_version)
    dropped = abi.unsupported(abi.FS_RIGHTS, abi_version)
    dropped += abi.unsupported(abi.NET_RIGHTS, abi_version) + abi.unsupported(abi.SCOPES, abi_version)
    rules = _Rules(supported_fs)
    gaps: list[Gap] = []
    notes: list[str] = []

    # The workspace and the writable roots must stay readable as a whole: files the
    # command (or the host, between commands) creates there later have to be
    # readable, and a per-entry grant only covers the entries that exist now.
    # So a hidden path inside one of them cannot be excluded: report it instead.
    open_roots = sorted({r for r in (policy.workspace, *policy.writable_roots) if r.is_dir()})
    # One hidden path per workspace this user ever ran in: sorted by a key
    # and tested by string prefix, not by a ``Path`` comparison per pair.
    hidden_all = sorted(set(policy.hidden_paths), key=lambda p: p.parts)
    open_names = tuple(str(r) for r in open_roots)
    open_prefixes = tuple(name.rstrip("/") + "/" for name in open_names)
    hidden_open = [h for h in hidden_all if str(h) in open_names or str(h).startswith(open_prefixes)]
    open_hidden = set(hidden_open)
    hidden = [h for h in hidden_all if h not in open_hidden]
    # dsh-sandbox's state directories are granted per entry, never whole, even
    # when nothing in them is hidden at the start: another session may make its
    # HOME, its private /tmp or the escalation log there during the run, and an
    # entry made later is then not readable.  A name no entry can have (NUL)
    # marks each as a directory to split.
    never_whole = [Path(d) / "\0" for d in sorted(own_state.state_parents(kept_paths(policy)))]
    read_grants, read_ancestors = split_tree(Path("/"), [*hidden, _DEV, *never_whole])
    rules.grant(read_grants, abi.FS_READ | abi.FS_EXECUTE)
    rules.grant([*read_ancestors, _DEV], abi.FS_READ_DIR)
    hidden_names = [str(h) for h in hidden]
    rules.grant([r for r, name, prefix in zip(open_roots, open_names, open_prefixes, strict=True)
                 if not any(h == name or h.startswith(prefix) for h in hidden_names)], abi.FS_READ | abi.FS_EXECUTE)
    for path in hidden_open:
        root = next(r for r in open_roots if is_within(path, r))
        gaps.append(
            Gap(
                DEGRADE_HIDDEN_IN_ROOT,
                f"cannot hide {path}: it lies inside {root}, which stays readable as a whole so that "
                "entries created there later are readable, and Landlock only grants access",
            )
        )
    # dsh-sandbox's own state is hidden the same way; its names tell nothing (``state_paths``).
    state = set(policy.state_paths)
    named = [h for h in hidden if h not in state]
    if named:
        gaps.append(
            Gap(
                DEGRADE_HIDDEN,
                "hidden paths " + ", ".join(map(str, named)) + ": contents are unreadable, but their "
                "names, metadata (stat) and directory listings stay visible: Landlock only grants "
                "access and never mediates path lookup or stat",
            )
        )
    notes.append(
        "read rights were granted per entry of "
        + ", ".join(map(str, read_ancestors))
        + " (to exclude /dev" + (" and the hidden paths" if hidden else "") + "); entries created there later "
        "are not readable"
    )
    notes.append(
        "/dev: only " + ", ".join(map(str, (_DEV_NULL, *_DEV_READABLE))) + " are granted: no terminal "
        "(/dev/tty, /dev/pts, /dev/console, /dev/ptmx), disk, input, sound or video device, and not the "
        "host's /dev/shm (so POSIX semaphores and multiprocessing locks fail); an inherited terminal fd "
        "keeps working"
    )
    rules.grant([p for p in _DEV_READABLE if p.exists()], abi.FS_READ)
    rules.grant([_DEV_NULL], abi.FS_READ | abi.FS_WRITE_FILE | abi.FS_TRUNCATE | abi.FS_IOCTL_DEV)

    if policy.mode is SandboxMode.WORKSPACE_WRITE:
        _plan_writes(policy, strategy, rules, gaps, notes)
        gaps.append(
            Gap(
                DEGRADE_METADATA,
                "cannot stop chmod, chgrp, utime or xattr changes to files outside the writable roots that the "
                "command's uid owns (every root-owned file when the caller is root): Landlock has no rights for "
                "file metadata (seccomp refuses them in read-only mode only); chown to another uid fails, as no "
                "capability is left",
            )
        )

    if abi_version < 6:
        gaps.append(
            Gap(
                DEGRADE_SCOPES,
                f"Landlock ABI {abi_version} has no scopes (ABI 6): "
                "the command can signal processes "
                "outside the sandbox and connect to abstract unix sockets outside it",
            )
        )
    if abi_version < 3 and policy.mode is not SandboxMode.DANGER_FULL_ACCESS:
        gaps.append(
            Gap(
                DEGRADE_TRUNCATE,
                f"Landlock ABI {abi_version} has no TRUNCATE right (ABI 3): truncate(2) of files "
                "outside the writable roots is not prevented",
            )
        )
    if abi_version < 2:
        notes.append("Landlock ABI 1 refuses every cross-directory rename and link (no REFER)")
    if abi_version < 5:
        notes.append(f"Landlock ABI {abi_version} cannot restrict device ioctls (IOCTL_DEV, ABI 5)")
    ordered = tuple(PathRule(path, rights) for path, rights in sorted(rules.by_path.items()))
    return RulePlan(
        abi=abi_version,
        handled_fs=supported_fs,
        handled_net=handled_net,
        scoped=scoped,
        rules=ordered,
        dropped=dropped,
        gaps=tuple(gaps),
        notes=tuple(notes),
    )


def _plan_writes(
    policy: SandboxPolicy,
    strategy: ProtectedStrategy,
    rules: _Rules,
    gaps: list[Gap],
    notes: list[str],
) -> None:
    roots = [root for root in policy.writable_roots if root.is_dir()]
    for root in policy.writable_roots:
        if root not in roots:
            notes.append(f"writable root {root} does not exist (or is not a directory): not granted")
    keep_read_only = sorted(set(policy.protected_paths) | set(policy.read_only_paths))
    for root in roots:
        inside = [path for path in keep_read_only if is_within(path, root)]
        if not inside:
            rules.grant([root], abi.FS_WRITE)
            continue
        if strategy == "siblings":
            granted, ancestors = split_tree(root, inside)
            rules.grant(granted, abi.FS_WRITE)
            notes.append(
                "to keep " + ", ".join(map(str, inside)) + " read-only, write rights were granted "
                "per entry: no entry can be created, removed or renamed directly in " + ", ".join(map(str, ancestors))
            )
            continue
        rules.grant([root], abi.FS_WRITE)
        for path in inside:
            gaps.append(
                Gap(
                    DEGRADE_PROTECTED,
                    f"cannot keep {path} read-only inside writable root {root}: Landlock only grants access",
                )
            )


def build_ruleset(plan: RulePlan, pins: PinnedPaths | None = None, connect_ports: tuple[int, ...] = (),
                  readable_files: tuple[str, ...] = ()) -> int:
    """Create the ruleset fd for ``plan`` (the caller closes it); with the
    network handled, TCP ``connect()`` is allowed to ``connect_ports`` only
    (the allowlist's proxy), ``bind()`` to none.  ``readable_files``: files
    of the runner's own (the session CA bundle) granted for reading alone,
    wherever the plan stands on their directory.

    A rule on a path the policy service pinned (the workspace, a writable
    root, a read-only path) is added on the pinned fd: what was checked when
    the policy was resolved, wherever its name points now.  A rule below a
    pinned root is opened from the root's fd, one component at a time; any
    other one by name, and dropped unless the fd is still at the planned path.
    """
    fd = abi.create_ruleset(plan.abi, plan.handled_fs, plan.handled_net, plan.scoped)
    try:
        for rule in plan.rules:
            _add_path(fd, rule, pins)
        for name in readable_files:
            file_fd = os.open(name, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                abi.add_path_rule(fd, file_fd, abi.READ_FILE & plan.handled_fs)
            finally:
                os.close(file_fd)
        connect = plan.handled_net & abi.NET_RIGHTS["CONNECT_TCP"][0]
        if connect_ports and not connect:
            raise SandboxUnavailable(f"Landlock ABI {plan.abi} cannot limit connect() by port (ABI 4); nothing ran",
                                     runner="landlock")
        for port in connect_ports:
            abi.add_net_port_rule(fd, port, connect)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_rule_path(path: Path, pins: PinnedPaths | None) -> int | None:
    """An ``O_PATH`` fd for a rule's path, or ``None`` to grant nothing there."""
    if pins is not None:
        if pins.get(path) is not None:
            return pins.dup(path)
        if any(p.is_dir and is_within(path, p.path) for p in pins):
            return open_beneath(pins, path)
    try:
        path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None  # vanished since planning: granting less is safe
    try:
        here = os.readlink(f"/proc/self/fd/{path_fd}")
    except OSError:
        here = str(path)
    if here != str(path):
        # A directory on the way was swapped for a symlink since planning.
        os.close(path_fd)
        return None
    return path_fd


def _add_path(ruleset_fd: int, rule: PathRule, pins: PinnedPaths | None) -> None:
    path_fd = _open_rule_path(rule.path, pins)
    if path_fd is None:
        return
    try:
        mode = os.fstat(path_fd).st_mode
        if stat.S_ISLNK(mode):
            return  # swapped for a symlink since planning: never follow it
        rights = rule.rights if stat.S_ISDIR(mode) else rule.rights & abi.FS_FILE_RIGHTS
        if rights:
            abi.add_path_rule(ruleset_fd, path_fd, rights)
    finally:
        os.close(path_fd)
