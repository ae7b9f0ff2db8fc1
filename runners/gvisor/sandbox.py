"""One warm gVisor sandbox: made with ``runsc create``/``start``, removed with ``delete``.

runsc is driven through its OCI interface directly (see ``runner`` for why
not the ``gvisor`` package).  Each session has its own state directory (runsc's
``--root``), private to the caller and masked inside every sandbox, so no
command can read or rewrite the bundles or runsc's state.

The gofer binds each source by path when the sandbox starts.  Every source is
therefore opened first (``O_PATH|O_NOFOLLOW``, checked through
``/proc/self/fd``: no symlink on the way) and held while the sandbox lives,
and after ``start`` each path must still be that inode: a directory swapped
for a symlink while runsc was starting fails the start instead of redirecting
a writable bind.  Before every command the same identities are checked again:
a protected path the host replaced (``rm -rf .git; git init``) makes a new
sandbox, since a bind holds the old inode, not the name.

A name checked on the host again after the start cannot tell where the gofer
mounted: a directory swapped for a *relative* symlink while it binds sends
the source and the mount point through the link alike, and is swapped back
before the check.  So after ``start`` the gofer's own mount table is checked
too (``dsh.runners.linux.mount_check``): each pinned bind must be mounted at
exactly its destination, reached without a symlink, and be the pinned inode.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.runners.linux.chroot import chroot_reason
from dsh.runners.linux.mount_check import ExpectedMount, identity_of, mount_problem
from dsh.runners.linux.orphans import become_subreaper, kill_tree, process_tree, processes_naming, reap_tree
from dsh.runners.linux.pinned_open import changed, open_checked, pinned_parent
from dsh.runners.linux.placeholders import Placeholder
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.pins import PinnedPaths

_TIMEOUT_S = 60
_REAP_S = 5  # runsc delete kills the sandbox; its processes end within moments
Identities = dict[str, tuple[int, int] | None]


def _changed(path: str, detail: str) -> SandboxUnavailable:
    return changed(path, detail, "gvisor")


def identities(paths: Sequence[str]) -> Identities:
    out: Identities = {}
    for path in paths:
        try:
            st = os.lstat(path)
            out[path] = (st.st_dev, st.st_ino)
        except OSError:
            out[path] = None
    return out


@dataclass
class WarmSandbox:
    """A running sandbox of one shape and what holds its mounts in place."""

    id: str
    runsc: tuple[str, ...]  # the binary and its global flags
    bundle: Path
    pinned: Identities = field(default_factory=dict)
    fds: list[int] = field(default_factory=list)
    placeholders: list[Placeholder] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    pid: int | None = None  # the sandbox's own process (gVisor's kernel)
    gofer: int | None = None  # its file server
    # Commands prepared for this sandbox and not started yet, and those running.
    pending: int = 0
    running: int = 0
    # Another policy's sandbox is current: this one goes once idle.
    stale: bool = False

    def reserve(self) -> None:
        with self.lock:
            self.pending += 1

    def began(self) -> None:
        with self.lock:
            self.pending = max(0, self.pending - 1)
            self.running += 1

    def ended(self) -> None:
        with self.lock:
            self.running = max(0, self.running - 1)

    def idle(self) -> bool:
        with self.lock:
            return self.pending == 0 and self.running == 0

    def alive(self) -> bool:
        if self.closed or self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # it exists (as root, runsc runs it as another user)
        # A dead sandbox whose parent has not reaped it yet (runsc's own
        # process exited and an init that reaps late adopted it) is a zombie:
        # kill(0) still succeeds on it.
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in (b"Z", b"X")

    def moved(self) -> list[str]:
        """The sources that are no longer the inode the sandbox bound."""
        return [p for p, i in identities(list(self.pinned)).items() if self.pinned[p] != i]

    def intact(self) -> bool:
        """Is every source still the inode the sandbox bound?"""
        return not self.moved()

    def release(self) -> None:
        for ph in self.placeholders:
            ph.release()
        held = {ph.fd for ph in self.placeholders}
        for fd in self.fds:
            if fd not in held:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.placeholders.clear()
        self.fds.clear()

    def destroy(self) -> None:
        """Kill everything in it and remove it (idempotent)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        # runsc daemonized these; with this process a subreaper they are its
        # children by now, and nothing else would reap them.
        # A start that failed or timed out may not have said who it started:
        # what names this sandbox's bundle is its too.
        tree = process_tree([*(p for p in (self.pid, self.gofer) if p is not None),
                             *processes_naming(str(self.bundle))])
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            deleting = subprocess.Popen([*self.runsc, "delete", "-force", self.id], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # runsc delete waits for the sandbox to be gone, and a zombie of
            # this process is not gone until this process reaps it: reap
            # meanwhile, or each delete waits out runsc's own timeout.
            deadline = time.monotonic() + _TIMEOUT_S
            while deleting.poll() is None:
                if time.monotonic() > deadline:
                    deleting.kill()
                    deleting.wait()
                    break
                reap_tree(tree, 0)
                time.sleep(0.005)
        # runsc finds the sandbox by its state directory; with that gone (its
        # cache removed during the session) it deletes nothing, and the
        # sandbox and gofer would run on, orphaned: what still runs is killed.
        kill_tree(tree)
        reap_tree(tree, _REAP_S)
        self.release()
        with contextlib.suppress(OSError):
            for name in os.listdir(self.bundle):
                os.unlink(self.bundle / name)
            os.rmdir(self.bundle)


def _runsc(argv: list[str], log: Path, pass_fds: Sequence[int] = ()) -> tuple[int, str]:
    # stderr goes to a file: a detached sandbox inherits the descriptors of
    # ``runsc create``, and a pipe would then never reach EOF.
    with open(log, "w+b") as err:
        try:
            code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                  timeout=_TIMEOUT_S, check=False, start_new_session=True,
                                  pass_fds=tuple(pass_fds)).returncode
        except subprocess.TimeoutExpired:
            return -1, f"{argv[-1]}: runsc did not answer within {_TIMEOUT_S} s"
        err.seek(0)
        return code, err.read().decode("utf-8", "replace").strip()


def _in_namespace_of(pid: int, runsc: Sequence[str]) -> tuple[str, ...]:
    """``runsc`` run from the network namespace of the sandbox ``pid`` (root
    only, as runsc's ``--network=host`` is: ``/proc/PID/ns`` of any process)."""
    nsenter = system_tool("nsenter")
    if nsenter is None:
        raise SandboxUnavailable("nsenter (util-linux) is not in /usr/sbin, /usr/bin, /sbin or /bin: the sandbox "
                                 "in the allowlist's namespace cannot be reached; nothing ran", runner="gvisor")
    return (nsenter, f"--net=/proc/{pid}/ns/net", "--", *runsc)


def _sandbox_pid(runsc: Sequence[str], sid: str, pass_fds: Sequence[int] = ()) -> int | None:
    try:
        out = subprocess.run([*runsc, "state", sid], capture_output=True, text=True, timeout=_TIMEOUT_S,
                             check=False, stdin=subprocess.DEVNULL, pass_fds=tuple(pass_fds)).stdout
        pid = json.loads(out).get("pid")
    except (OSError, subprocess.SubprocessError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def create(runsc: Sequence[str], state_dir: Path, sid: str, config: dict[str, Any],
           sources: Sequence[str], placeholders: Sequence[str], pins: PinnedPaths | None = None, *,
           runsc_root: Path, enter: tuple[Sequence[str], Sequence[int]] | None = None) -> WarmSandbox:
    """Make and start the sandbox ``sid`` from ``config``; ``sources``: the bind
    sources to hold; ``pins``: the policy's paths as the policy service
    resolved them (each source it holds must still be that inode, and a
    placeholder is made from its pinned directory, never through a name);
    ``runsc_root``: runsc's ``-root`` in ``runsc``, where it keeps the sandbox's state;
    ``enter``: an argv prefix and the fds it needs, which start ``runsc create``
    (and so the sandbox) inside another network namespace."""
    bundle = state_dir / "bundles" / sid
    bundle.mkdir(parents=True, mode=0o700)
    warm = WarmSandbox(sid, tuple(runsc), bundle)
    try:
        for path in placeholders:
            parent = pinned_parent(path, pins, runner="gvisor")
            try:
                ph = Placeholder.acquire(path, parent)
            except OSError as exc:
                raise SandboxUnavailable(f"cannot make the read-only placeholder {path} for a missing protected "
                                         f"path: {exc.strerror or exc}; nothing ran", runner="gvisor") from None
            finally:
                if parent is not None:
                    os.close(parent)
            if ph is None:
                raise _changed(path, "a real entry appeared where a placeholder was planned")
            warm.placeholders.append(ph)
            warm.fds.append(ph.fd)
        held = [p for p in sources if p not in placeholders]
        held_fds = []
        for path in held:
            held_fds.append(open_checked(path, directory=False, runner="gvisor"))
            warm.fds.append(held_fds[-1])
            pin = pins.get(path) if pins is not None else None
            if pin is not None and identity_of(held_fds[-1]) != pin.identity:
                raise _changed(path, "it is no longer the directory the policy resolved")
        warm.pinned = identities([*held, *placeholders])
        (bundle / "config.json").write_text(json.dumps(config))
        log = bundle / "runsc.log"
        prefix, fds = enter if enter is not None else ((), ())
        become_subreaper()  # runsc daemonizes the sandbox and gofer: they become ours to reap
        code, err = _runsc([*prefix, *runsc, "create", "-bundle", str(bundle), sid], log, fds)
        if code == 0:
            # runsc reaches its sandbox through an abstract unix socket, which
            # lives in the sandbox's network namespace: started in another,
            # it is reached from there.
            code, err = _runsc([*prefix, *runsc, "start", sid], log, fds)
        if code != 0:
            # A source swapped while runsc set up makes it fail in ways that
            # read like "gVisor cannot run here" (a gofer sync file at EOF).
            moved = warm.moved()
            if moved:
                said = (err or f"exit {code}").splitlines()[-1][:300]
                raise _changed(", ".join(moved), f"a bind source was replaced while runsc started; runsc: {said}")
            raise SandboxUnavailable(_start_failure(err or f"exit {code}"), runner="gvisor")
        warm.pid = _sandbox_pid([*prefix, *runsc], sid, fds)
        if enter is not None:
            if warm.pid is None:
                raise SandboxUnavailable("runsc started the sandbox but does not say its process; nothing ran",
                                         runner="gvisor")
            warm.runsc = _in_namespace_of(warm.pid, runsc)
        warm.gofer = _gofer_pid(runsc_root, sid)
        moved = warm.moved()
        if moved:
            raise _changed(", ".join(moved), "a bind source was replaced while runsc started")
        by_source = {**dict(zip(held, held_fds, strict=True)), **{ph.path: ph.fd for ph in warm.placeholders}}
        _check_gofer(warm.gofer, [ExpectedMount(m["destination"], identity_of(by_source[m["source"]]),
                                                onto_itself=m["destination"] == m["source"])
                                  for m in config.get("mounts", [])
                                  if m.get("type") == "bind" and m.get("source") in by_source])
    except BaseException:
        warm.destroy()
        raise
    return warm


def _check_gofer(pid: int | None, expected: list[ExpectedMount]) -> None:
    """The gofer (``pid``) serves the sandbox's files from its own mount
    namespace: its mount table must hold each pinned bind at its destination."""
    if not expected:
        return
    problem = "runsc's file server (the gofer) cannot be found" if pid is None else mount_problem(pid, expected)
    if problem is not None:
        raise SandboxUnavailable(f"{problem}; nothing ran, retry", runner="gvisor")


def _gofer_pid(runsc_root: Path, sid: str) -> int | None:
    """The gofer's pid, from runsc's state file (``<root>/<id>_sandbox:<id>.state``)."""
    try:
        with open(runsc_root / f"{sid}_sandbox:{sid}.state") as fh:
            pid = json.load(fh).get("goferPid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def _start_failure(err: str) -> str:
    """Why runsc could not start a sandbox; in a chroot, the chroot: the kernel
    refuses the user namespace runsc makes, and its EPERM alone sends the user
    looking at sysctls and permissions."""
    reason = f"runsc cannot start a sandbox here: {err}"
    if "not permitted" in err.lower():
        chrooted = chroot_reason()
        if chrooted is not None:
            return f"{reason} ({chrooted})"
    return reason
