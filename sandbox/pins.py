"""Policy paths resolved once, component by component, and held by fd.

A path the policy names (the workspace, a writable root, a read-only or hidden
path) is resolved by ``walk``: from ``/`` (or from the fd of the directory a
relative path hangs off) one component at a time with
``openat(O_PATH|O_NOFOLLOW)``.  A symlink met on the way is judged right there,
by the directory that holds it (``policy_guard.link_refusal``): one that a
sandboxed command could have planted is refused, one in a system directory
is read through its own fd and followed.  The walk ends holding an fd of what
it checked, and the canonical path is read back from that fd, so no later
step resolves the name again: a directory swapped for a symlink after the walk
(``renameat2(RENAME_EXCHANGE)`` by a concurrent run) changes nothing, because
runners bind, grant and read through the fd.

A ``Pin`` is one held path; ``PinnedPaths`` the pins of one resolved policy.
The policy service keeps the fds for the session (``PinStore``) and closes them
with it; a runner that needs an fd beyond its ``prepare`` takes its own
``dup``.  ``SandboxPolicy`` itself stays a hashable value without fds.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_guard import link_refusal

_O_PATH = getattr(os, "O_PATH", os.O_RDONLY)
_STEP = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's ELOOP limit
_ATTEMPTS = 5  # walks that raced with a rename of a directory above the path
# A component we cannot look up (no search permission, too long): what lies
# beyond is unreachable for a command of the same uid with no capabilities too.
_UNREACHABLE = (errno.EACCES, errno.EPERM)


@dataclass(frozen=True)
class Pin:
    """One policy path held open: ``fd`` (``O_PATH``) is what was checked, and
    ``path`` is its canonical name, read back from the fd."""

    path: Path
    fd: int
    dev: int
    ino: int
    is_dir: bool

    @property
    def identity(self) -> tuple[int, int]:
        return (self.dev, self.ino)


@dataclass(frozen=True)
class Resolved:
    """A walked path: canonical (a missing tail kept as written), and its pin,
    or ``None`` when it does not exist (or cannot be reached)."""

    path: Path
    pin: Pin | None


class PathRaced(SandboxUnavailable):
    """A directory above a policy path kept moving while it was resolved."""


def _fd_path(fd: int) -> str | None:
    """Where ``fd`` is now, as the kernel names it (``None``: cannot tell)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def walk(label: str, raw: str, path: Path, base: Pin | None = None) -> Resolved:
    """Resolve ``path`` (absolute, or relative to ``base``) once, and pin it.

    ``label`` and ``raw`` name the setting in errors.  Raises ``ConfigError``
    for a link a sandboxed command could have planted (or a loop, or a name the
    kernel refuses), ``PathRaced`` when a directory above kept being renamed
    during the walk.  Never an ``OSError``.
    """
    for _ in range(_ATTEMPTS):
        try:
            result = _walk_once(label, raw, path, base)
        except OSError as exc:
            # Each step's own failures are handled where they happen; anything
            # else the kernel says is about this path, and is said as such.
            raise ConfigError(f"{label}: {raw}: cannot resolve it ({exc.strerror or exc})") from None
        if result is not None:
            return result
    raise PathRaced(
        f"{label}: {raw}: a directory on the way to it kept being renamed while it was "
        "resolved; nothing ran, retry once nothing moves it"
    )


def _walk_once(label: str, raw: str, path: Path, base: Pin | None) -> Resolved | None:
    """One walk; ``None`` when a rename above it made the result untrustworthy."""
    if path.is_absolute():
        fd, current = _open_dir(label, raw, "/"), Path("/")
        pending = list(path.parts[1:])
    elif base is None:
        fd = _open_dir(label, raw, ".")
        current = Path(_fd_path(fd) or os.getcwd())
        pending = list(path.parts)
    else:
        fd = os.dup(base.fd)
        current = Path(_fd_path(fd) or base.path)  # where the base is now
        pending = list(path.parts)
    shown = current / path  # as written, made absolute: what errors name
    links = 0
    try:
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                parent = os.open("..", _STEP | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd, current = parent, current.parent
                continue
            try:
                step = os.open(part, _STEP, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, *_UNREACHABLE):
                    raise ConfigError(
                        f"{label}: {raw}: cannot resolve {current / part} ({exc.strerror})"
                    ) from None
                rest = Path(os.path.normpath(os.path.join(part, *pending))).parts
                if rest and rest[0] == part:
                    # Missing for good: the rest is kept as written, as realpath does.
                    return Resolved(Path(os.path.normpath(current.joinpath(*rest))), None)
                pending = list(rest)  # ``missing/..`` cancels out, as realpath reads it
                continue
            info = os.fstat(step)
            if stat.S_ISLNK(info.st_mode):
                try:
                    target = os.readlink("", dir_fd=step)
                finally:
                    os.close(step)
                refusal = link_refusal(label, raw, shown, current / part, target, current)
                if refusal is not None:
                    if not _still_link(fd, part, info, target):
                        return None  # swapped under the walk: a race, not a planted link
                    raise refusal
                links += 1
                if links > _MAX_LINKS:
                    raise ConfigError(f"{label}: {raw}: too many symlinks on the way to {shown} (a loop?)")
                if os.path.isabs(target):
                    os.close(fd)
                    fd, current = _open_dir(label, raw, "/"), Path("/")
                pending[:0] = [p for p in Path(target).parts if p != "/"]
                continue
            if not stat.S_ISDIR(info.st_mode) and any(p not in ("", ".") for p in pending):
                os.close(step)
                # Nothing can exist below a file: kept as written, like realpath does.
                return Resolved(Path(os.path.normpath(current.joinpath(part, *pending))), None)
            os.close(fd)
            fd, current = step, current / part
        actual = _fd_path(fd)
        if actual is not None and actual != str(current):
            return None  # a directory above moved under the walk: what was checked is not this
        info = os.fstat(fd)
        pin = Pin(current, fd, info.st_dev, info.st_ino, stat.S_ISDIR(info.st_mode))
        fd = -1
        return Resolved(current, pin)
    finally:
        if fd >= 0:
            os.close(fd)


def _still_link(fd: int, name: str, seen: os.stat_result, target: str) -> bool:
    """Is ``name`` in ``fd`` still the link the walk met (same inode, same target)?"""
    try:
        now = os.stat(name, dir_fd=fd, follow_symlinks=False)
        return (stat.S_ISLNK(now.st_mode) and (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino)
                and os.readlink(name, dir_fd=fd) == target)
    except OSError:
        return False


def _open_dir(label: str, raw: str, path: str) -> int:
    try:
        return os.open(path, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{label}: {raw}: cannot open {path} ({exc.strerror})") from None


def _close_pins(pins: dict[tuple[Path, int, int], Pin]) -> None:
    held = list(pins.values())
    pins.clear()
    for pin in held:
        try:
            os.close(pin.fd)
        except OSError:
            pass


class PinStore:
    """The session's pins: one fd per distinct (path, inode) it resolved, closed
    with the session.  Thread-safe; ``close`` is idempotent.  A store dropped
    without ``close`` (a caller that never closed its session) closes its fds
    when it is collected, so a long-lived process cannot run out of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pins: dict[tuple[Path, int, int], Pin] = {}
        self._by_policy: dict[SandboxPolicy, PinnedPaths] = {}
        self._closed = False
        # Runs once: at ``close`` or at collection, whichever comes first.
        self._release = weakref.finalize(self, _close_pins, self._pins)

    def walk(self, label: str, raw: str, path: Path, base: Pin | None = None) -> Resolved:
        """``walk``, keeping the pin (an equal one already held is reused)."""
        resolved = walk(label, raw, path, base)
        pin = resolved.pin
        if pin is None:
            return resolved
        with self._lock:
            if self._closed:
                os.close(pin.fd)
                raise SandboxUnavailable("the session is closed; its policy paths are no longer held")
            kept = self._pins.setdefault((pin.path, pin.dev, pin.ino), pin)
        if kept is not pin:
            os.close(pin.fd)
        return Resolved(resolved.path, kept)

    def remember(self, policy: SandboxPolicy, pins: Iterable[Pin]) -> PinnedPaths:
        """The pins of ``policy``, as runners will ask for them."""
        pinned = PinnedPaths({p.path: p for p in pins}, self)
        with self._lock:
            self._by_policy[policy] = pinned
        return pinned

    def pins_of(self, policy: SandboxPolicy) -> PinnedPaths | None:
        with self._lock:
            return self._by_policy.get(policy)

    def dup(self, pin: Pin) -> int:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the session is closed; its policy paths are no longer held")
            return os.dup(pin.fd)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._by_policy.clear()
            self._release()


class PinnedPaths:
    """The pins of one resolved policy, by canonical path.

    Borrowed from the policy service (the session owns the fds) or, for a
    policy no service resolved, owned: ``close`` then releases them.  Use it
    as a context manager around the work that needs the fds.
    """

    def __init__(self, pins: Mapping[Path, Pin], store: PinStore, *, owned: bool = False) -> None:
        self._pins = dict(pins)
        self._store = store
        self._owned = owned

    def __enter__(self) -> PinnedPaths:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Pin]:
        return iter(self._pins.values())

    def get(self, path: Path | str) -> Pin | None:
        # A Path as it is: parsing it again costs its length, at every level of a deep tree.
        return self._pins.get(path if isinstance(path, Path) else Path(path))

    def dup(self, path: Path | str) -> int | None:
        """A new ``O_PATH`` fd of the pinned ``path`` that the caller closes;
        ``None`` if the policy has no pin there."""
        pin = self.get(path)
        return None if pin is None else self._store.dup(pin)

    def close(self) -> None:
        if self._owned:
            self._store.close()


def pin_policy(policy: SandboxPolicy) -> PinnedPaths:
    """Pins for a policy no policy service resolved (a caller built it): each
    path is walked as above and must come back as itself, canonical."""
    store = PinStore()
    pins: list[Pin] = []
    try:
        for what, paths in (
            ("workspace", (policy.workspace,)),
            ("writable root", policy.writable_roots),
            ("read-only path", policy.read_only_paths),
            ("hidden path", policy.hidden_paths),
        ):
            for path in paths:
                if path == Path("/") and what == "writable root":
                    continue  # danger-full-access: nothing to hold
                resolved = store.walk(what, str(path), path)
                if resolved.pin is None:
                    continue
                if resolved.path != path:
                    raise SandboxUnavailable(
                        f"{what} {path} now resolves to {resolved.path}; nothing ran, resolve the policy again"
                    )
                pins.append(resolved.pin)
    except BaseException:
        store.close()
        raise
    return PinnedPaths({p.path: p for p in pins}, store, owned=True)


#: What a runner asks for the pins of a policy (the session's policy service).
PinSource = Callable[[SandboxPolicy], "PinnedPaths | None"]


def policy_pins(policy: SandboxPolicy, source: PinSource | None) -> PinnedPaths:
    """The pins the session made for ``policy``, else fresh ones (owned)."""
    pinned = source(policy) if source is not None else None
    return pinned if pinned is not None else pin_policy(policy)


def open_beneath(pins: PinnedPaths, path: Path, *, directory: bool = False) -> int | None:
    """An ``O_PATH`` fd of ``path`` (canonical) opened from the pin of the
    deepest pinned directory above it, one component at a time, no symlink
    followed; ``None`` if it is missing, a symlink, or not where it was
    planned.  For rules on entries inside a pinned root."""
    # The deepest pinned directory holding it, by name: the policy has few
    # pins, and a deep path has many parents.
    shown = str(path)
    holder = None
    for pin in pins:
        root = str(pin.path)
        if pin.is_dir and (shown == root or shown.startswith(root.rstrip("/") + "/")):
            if holder is None or len(root) > len(str(holder.path)):
                holder = pin
    if holder is None:
        return None
    fd = pins.dup(holder.path)
    if fd is None:
        return None
    try:
        for part in path.relative_to(holder.path).parts:
            step = os.open(part, _STEP, dir_fd=fd)
            os.close(fd)
            fd = step
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                os.close(fd)
                return None
        if directory and not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        result, fd = fd, -1
        return result
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
