"""``GvisorRunner``: commands on gVisor's user-space kernel, one warm sandbox per shape.

The command's system calls are served by gVisor's kernel (the sentry, itself
confined by a seccomp filter on the host): they never reach the host kernel's
system-call surface.  Its files are the host's, through runsc's gofer, so the
mount plan (``dsh.sandbox.mount_plan``) decides what it sees and may write,
exactly as for bwrap: the host's ``/`` read-only, writable roots bound
read-write, protected paths read-only, hidden paths masked.

One sandbox per session and shape (``runsc create`` + ``start`` with a
keep-alive process), one ``runsc exec`` per command, as the docker runner
keeps one container.  ``runsc`` is driven through its OCI interface directly,
not through Google's ``gvisor`` Python package: its ``Sandbox.exec`` returns
only the collected output as text (no streaming, bytes that are not UTF-8
lost), turns every non-zero exit into an ``Error`` carrying stderr (empty for
``false``: the "empty error" once seen as ``nobody``), has no signal and no
kill of a command's process tree, applies a timeout by killing the local
``runsc`` client only, and runs every command as root in the sandbox.

Options: ``runsc`` (the binary; default ``runsc`` on PATH).  Without root the
sandbox gets a user namespace that maps only the caller (as uid 0 inside, no
capability) and runs without cgroups (``--ignore-cgroups``); ``runsc --rootless`` serves only
``runsc do`` in the Debian build.  A session's sandboxes die with it, also
when the supervisor is killed (``keeper``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.runners.gvisor import sandbox as sb
from dsh.runners.gvisor.argv import encode_argv, text_env
from dsh.runners.gvisor.keeper import Keeper
from dsh.runners.gvisor.scripts import MARKER_VAR, WRAPPER, WRAPPER_DECODING
from dsh.runners.gvisor.spec import Identity, build_config, process, refuse_too_many_binds
from dsh.runners.gvisor.syscalls import LAUNCHER, filter_hex
from dsh.runners.linux.allowlist_session import AllowlistSession
from dsh.runners.linux.syscalls import UnsupportedArch
from dsh.runners.warm_pool import make_current
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import ConfigError, SandboxUnavailable, WorkdirError
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.mount_depth import refuse_too_deep
from dsh.sandbox.mount_plan import TMP, MountPlan, gather_facts, plan_mounts
from dsh.sandbox.own_dirs import first_own_dir
from dsh.sandbox.own_state import runner_state_candidates
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import (
    Baseline,
    Enforcement,
    Gap,
    Launch,
    LocalLaunch,
    RemoteLaunch,
    RemoteProcess,
    Runner,
    RunnerPlan,
    RunnerProbe,
    address_space_limitation,
)

if TYPE_CHECKING:
    from dsh.runners.linux.allowlist_networks import Entry
    from dsh.sandbox.net_proxy import Resolver
    from dsh.sandbox.stdin_feed import StdinFeed

OPTIONS = ("runsc",)
INSTALL_HINT = "install it: apt-get install runsc (Debian), or see gvisor.dev for other systems"
_PROBE_TIMEOUT_S = 30

BOUNDARY = ("the command's system calls are served by gVisor's user-space kernel (runsc): none reaches the "
            "host kernel's system-call surface; files are the host's, through runsc's gofer, as mounted below")
STATX_LIMITATION = ("this runsc refuses AT_NO_AUTOMOUNT in statx and newfstatat with EINVAL (gVisor before "
                    "2023): coreutils stat, ls -l, and ls given a path (ls /) fail with 'Invalid argument'; "
                    "install a newer runsc")


SETID_GAP = ("as root, the command (uid 0 without capabilities) may chmod a file it owns in a writable root "
             "setuid/setgid, and the gofer applies that to the host's file: a setuid-root program left for other "
             "users; there is no syscall table for this machine to build the in-sandbox filter from")


ROOTLESS_NETWORK = ("the network is on, and runsc without root cannot give a sandbox the host's network "
                    "(--network=host needs CAP_SYS_ADMIN for its chroot); nothing ran: turn the network off, run "
                    "as root, or use another runner")

ROOTLESS_ALLOWLIST = ("gVisor limits the network to named hosts only as root: its sandbox then uses the network "
                      "namespace of the host's proxy (runsc --network=host, which needs CAP_SYS_ADMIN for its "
                      "chroot); nothing ran: run with --runner bwrap, or as root")


def _shape(policy: SandboxPolicy, plan: MountPlan) -> tuple[object, ...]:
    """Everything that makes a sandbox (not cwd, env or argv)."""
    return (plan.entries, policy.network, policy.network_allowlist, policy.limits)


class GvisorRunner(Runner):
    name: ClassVar[str] = "gvisor"
    #: gVisor's kernel answers the command: scenarios judged by what the command
    #: can open inside (tunables, netlink, io_uring) say nothing of the host's.
    #: Host-effect checks still apply: the files are the host's.
    separate_kernel: ClassVar[bool] = True
    network_by_name: ClassVar[bool] = True
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "gvisor-protected-symlink": (cap.PROTECTED_PATHS,),
        # Only where no syscall table builds the in-sandbox filter (its setid rules).
        "gvisor-setid-files": (cap.SYSCALL_FILTER,),
    }

    def __init__(self, options: Mapping[str, Any] | None = None, *, proxy_resolver: Resolver | None = None) -> None:
        """``proxy_resolver``: how the allowlist proxy resolves names (the
        system's resolver unless given; tests map names to loopback servers)."""
        super().__init__(options)
        self._allowlists = AllowlistSession(proxy_resolver)
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"gvisor runner: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
        self.identity = Identity.current()
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()
        self._runsc: str | None = None
        self._state: Path | None = None
        self._keeper: Keeper | None = None
        self._warm: dict[tuple[object, ...], sb.WarmSandbox] = {}
        self._statx_broken = False
        self._filter: str | None = None  # hex of the in-sandbox filter; None: no table for this machine

    # -- probe ----------------------------------------------------------------------
    def detect(self) -> RunnerProbe:
        runsc = system_tool(str(self.options.get("runsc", "runsc")))  # never the caller's PATH
        if runsc is None:
            return RunnerProbe(self.name, False, f"runsc not found; {INSTALL_HINT}")
        try:
            out = subprocess.run([runsc, "--version"], capture_output=True, text=True, errors="replace",
                                 timeout=_PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            return RunnerProbe(self.name, False, f"{runsc} cannot be run: {exc}")
        first = out.stdout.splitlines()[0] if out.stdout else ""
        if out.returncode != 0 or not first.startswith("runsc version"):
            return RunnerProbe(self.name, False, f"{runsc} --version failed: {out.stderr.strip() or first}")
        self._runsc = runsc
        release = first.removeprefix("runsc version").strip()
        # Release dates are in the version; statx(AT_NO_AUTOMOUNT) came in 2023.
        digits = release.split("~")[-1].split(".")[0].split("-")[0]
        self._statx_broken = digits.isdigit() and len(digits) == 8 and digits < "20230101"
        try:
            self._filter = filter_hex()
        except UnsupportedArch:
            self._filter = None
        return RunnerProbe(self.name, True, None, f"runsc {release}",
                           {"path": runsc, "root": self.identity.root, "user_namespace": not self.identity.root})

    def _global_flags(self, network: bool) -> list[str]:
        assert self._runsc is not None and self._state is not None
        flags = [self._runsc, "-root", str(_runsc_root(self._state)), f"-network={'host' if network else 'none'}",
                 # Host changes between commands must be seen: the root is not the sandbox's alone.
                 "-file-access=shared"]
        if not self.identity.root:
            flags.append("-ignore-cgroups")
        return flags

    # -- policy ----------------------------------------------------------------------
    def _plan(self, policy: SandboxPolicy) -> MountPlan:
        plan = plan_mounts(policy, gather_facts(policy, self.identity.uid))
        refuse_too_deep(plan, self.name)
        refuse_too_many_binds(plan)
        return plan

    def _gaps(self, policy: SandboxPolicy, plan: MountPlan) -> list[Gap]:
        if not policy.constrained:
            return []
        gaps = list(plan.gaps_for(self.name))
        if self.identity.root and plan.of_kind("writable") and self.probe().available and self._filter is None:
            gaps.append(Gap("gvisor-setid-files", SETID_GAP))
        return gaps

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        gaps = self._gaps(policy, self._plan(policy)) if policy.constrained else []
        return Enforcement.partial(gaps) if gaps else Enforcement.full()

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        if not policy.constrained:
            return RunnerPlan(self.name, policy.mode, ("no sandbox: command runs as is",), "on: host network",
                              (), ())
        plan = self._plan(policy)
        probe = self.probe()
        rules = [
            BOUNDARY,
            "root: the host's / read-only; /proc, /dev and /sys are gVisor's own",
            *(e.describe() for e in plan.entries if e.kind != "show"),
            *plan.overridden,
            f"user {self.identity.uid}:{self.identity.gid}, no capabilities, no_new_privs"
            + ("" if self.identity.root else " on the host: uid 0 in a user namespace that maps only the caller"),
            "pid, ipc, uts, mount and network namespaces of gVisor's kernel; host unix sockets unreachable",
        ]
        if self._filter is not None:
            rules.append("a filter in gVisor's kernel per command: setuid/setgid mode bits refused (chmod family; "
                         "open, creat, mknod modes; openat2 ENOSYS)")
        network = "on: host network (runsc --network=host)" if policy.network else \
            "off: runsc --network=none (own loopback only)"
        if policy.network_allowlist is not None:
            from dsh.runners.linux.net_namespace import plan_line

            network = plan_line(policy.network_allowlist) + " (runsc --network=host in the proxy's namespace)"
        limits = policy.limits
        lines = []
        if limits.max_processes is not None:
            lines.append(f"processes <= {limits.max_processes}: RLIMIT_NPROC in gVisor's kernel (all of the "
                         "session's commands in this sandbox count)")
        if limits.max_memory_bytes is not None:
            lines.append(f"memory <= {limits.max_memory_bytes} bytes: RLIMIT_AS per process")
        if limits.max_file_size_bytes is not None:
            lines.append(f"file size <= {limits.max_file_size_bytes} bytes: RLIMIT_FSIZE")
        if limits.wall_time_s is not None:
            lines.append(f"wall time <= {limits.wall_time_s:g} s: killed by the runner, exit status 124")
        cannot = [g.reason for g in self._gaps(policy, plan)]
        cannot += [f"writable root {p} does not exist: not bound" for p in policy.missing_roots]
        cannot += self.limitations(policy).values()
        cannot.append("a command that clears its environment AND leaves its process tree (env -i + double "
                      "fork) survives its kill; it dies with the sandbox at the end of the session")
        if policy.network and not self.identity.root:
            cannot.insert(0, ROOTLESS_NETWORK)
        if not probe.available:
            cannot.insert(0, f"gvisor unavailable: {probe.reason}")
        return RunnerPlan(self.name, policy.mode, tuple(rules), network, tuple(lines), tuple(cannot))

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        found: dict[str, str] = {}
        if policy.constrained and policy.limits.max_memory_bytes is not None:
            found.update(address_space_limitation(policy.limits.max_memory_bytes))
        if policy.constrained and self.probe().available and self._statx_broken:
            found[cap.FILE_STATUS.name] = STATX_LIMITATION
        return found

    def reporting_gaps(self, policy: SandboxPolicy) -> Mapping[str, str]:
        if not policy.constrained:
            return {}
        return {cap.SIGNAL_STATUS.name: "runsc exec reports death by a signal the runner did not send "
                                        "as exit status 128+N"}

    def baseline(self, policy: SandboxPolicy, cwd: str) -> Baseline | None:
        """``runsc exec`` of ``true`` in the same warm sandbox, without dsh around it."""
        if not policy.constrained or policy.network_allowlist is not None or not self.probe().available:
            return None
        plan = self._plan(policy)
        warm = self._ensure(policy, plan, self._session_state(), None)
        warm.began()  # the reservation is not a command of the session: release it
        warm.ended()
        argv = [*warm.runsc, "exec", "-user", f"{self.identity.inside().uid}:{self.identity.inside().gid}",
                "-cwd", cwd, warm.id, "true"]
        return Baseline("runsc exec true (warm sandbox)",
                        lambda: subprocess.run(argv, check=True, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL))

    # -- session state -------------------------------------------------------------
    def _session_state(self) -> Path:
        """The session's private state directory, and the keeper that removes it."""
        with self._lock:
            if self._state is None:
                base = _state_base()
                state = Path(tempfile.mkdtemp(prefix="dsh-gvisor-", dir=base))
                self._state = state
                try:
                    self._keeper = Keeper.start(self._global_flags(False), str(state))
                except OSError as exc:
                    raise SandboxUnavailable(f"cannot start the gVisor keeper: {exc}", runner=self.name) from None
            return self._state

    # -- commands --------------------------------------------------------------------
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        command = argv
        if not policy.constrained:
            return LocalLaunch(argv=command)
        if policy.network and not self.identity.root:
            raise SandboxUnavailable(ROOTLESS_NETWORK, runner=self.name)
        plan = self._plan(policy)
        if self._filter is not None:
            python = _interpreter()
            cover = next((e.path for e in plan.of_kind("mask-dir", "mask-file")
                          if python == e.path or python.startswith(e.path.rstrip("/") + "/")), None)
            if cover is not None:
                raise SandboxUnavailable(f"the launcher's Python {python} lies in the hidden path {cover}: the "
                                         "sandbox could not start a command; run dsh from a Python outside it",
                                         runner=self.name)
        exact, decode = encode_argv(command)
        variables = {k: v for k, v in env.items() if k != MARKER_VAR}
        shown_tmp = next((e.path for e in plan.of_kind("private-tmp")), None)
        session_tmp = str(policy.private_tmp) if policy.private_tmp is not None else None
        if shown_tmp is not None and session_tmp is not None and variables.get("TMPDIR") == session_tmp:
            # The session's directory is mounted there: the short name keeps a
            # unix socket's path (a multiprocessing Manager, a test server)
            # under the kernel's 108-byte limit, whatever the HOME's length.
            variables["TMPDIR"] = shown_tmp
        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise WorkdirError(f"cwd {cwd!r} is not an existing absolute directory")
        state = self._session_state()
        entry = None
        if policy.network_allowlist is not None:
            entry = self._allowlists.enter(policy, self.name)
            variables.update(entry.env)
        environment = text_env(variables)
        try:
            warm = self._ensure(policy, plan, state, entry)
        finally:
            if entry is not None:
                entry.close()
        start = functools.partial(self._start, warm, exact, decode, cwd, environment, policy.limits.wall_time_s)
        return RemoteLaunch(start=start)

    def _ensure(self, policy: SandboxPolicy, plan: MountPlan, state: Path, entry: Entry | None) -> sb.WarmSandbox:
        """The sandbox for ``policy``, made if needed (inside the allowlist's
        namespace, entered through ``entry``, when it has one)."""
        key = _shape(policy, plan)
        with self._create_lock:
            with self._lock:
                warm = self._warm.get(key)
            if warm is not None and warm.alive() and warm.intact():
                return self._current(warm)
            if warm is not None:
                self._discard(warm)
            # The runner's state is masked wherever the command could see it (not
            # beneath a private /tmp, where the host's path is not there at all).
            hidden_tmp = any(e.kind == "private-tmp" for e in plan.entries) and state.is_relative_to(TMP)
            # Under an allowlist the host's network is the proxy's namespace, where runsc is started.
            network = policy.network or entry is not None
            config = build_config(plan, identity=self.identity, limits=policy.limits,
                                  masked=() if hidden_tmp else (str(state),), network=network)
            sources = [e.source or e.path for e in plan.entries
                       if e.kind in ("writable", "pin", "private-tmp", "read-only", "placeholder")]
            placeholders = [e.path for e in plan.of_kind("placeholder")]
            with self.pinned(policy) as pins:
                warm = sb.create(self._global_flags(network), state,
                                 f"dsh-{os.getpid()}-{uuid.uuid4().hex[:8]}", config, sources, placeholders, pins,
                                 runsc_root=_runsc_root(state),
                                 enter=(entry.prefix, entry.fds) if entry is not None else None)
            with self._lock:
                self._warm[key] = warm
            return self._current(warm)

    def _current(self, warm: sb.WarmSandbox) -> sb.WarmSandbox:
        """``warm`` is the sandbox the next command uses; the others go once idle (``warm_pool``)."""
        return make_current(warm, self._warm.values(), self._lock, self._discard)

    def _ended(self, warm: sb.WarmSandbox, path: Path) -> None:
        """A command of ``warm`` ended: its process file goes, and a stale sandbox once idle."""
        _unlink(path)
        warm.ended()
        if warm.stale and warm.idle():
            self._discard(warm)

    def _start(self, warm: sb.WarmSandbox, argv: list[str], decode: bool, cwd: str, env: list[str],
               wall_time_s: float | None, stdin: bytes | StdinFeed | None, deadline: float | None) -> RemoteProcess:
        from dsh.runners.gvisor.process import RunscExec

        marker = uuid.uuid4().hex
        args = ["/bin/sh", "-c", WRAPPER_DECODING if decode else WRAPPER, "sh", *argv]
        if self._filter is not None:
            args = [_interpreter(), "-I", "-S", "-c", LAUNCHER, self._filter, *args]
        spec = process(args, env=[*env, f"{MARKER_VAR}={marker}"], cwd=cwd, identity=self.identity.inside())
        path = warm.bundle / f"exec-{marker}.json"
        warm.began()
        ended = functools.partial(self._ended, warm, path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(spec, fh)
            return RunscExec([*warm.runsc, "exec", "-process", str(path), warm.id], runsc=warm.runsc,
                             sandbox_id=warm.id, marker=marker,
                             user=f"{self.identity.inside().uid}:{self.identity.inside().gid}", stdin=stdin,
                             wall_time_s=wall_time_s, on_unkillable=functools.partial(self._discard, warm),
                             on_close=ended)
        except OSError as exc:
            ended()
            raise SandboxUnavailable(f"cannot start runsc exec: {exc}", runner=self.name) from None
        except BaseException:
            ended()  # counted as running, it would keep a stale sandbox forever
            raise

    def _discard(self, warm: sb.WarmSandbox) -> None:
        with self._lock:
            for key, value in list(self._warm.items()):
                if value is warm:
                    del self._warm[key]
        warm.destroy()

    # -- network by allowlist -------------------------------------------------------
    def refuses_network_of(self, policy: SandboxPolicy) -> str | None:
        if policy.constrained and policy.network_allowlist is not None and not self.identity.root:
            return ROOTLESS_ALLOWLIST
        return None

    def network_mark(self, policy: SandboxPolicy) -> int:
        return self._allowlists.mark(policy)

    def network_refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        return self._allowlists.refused(policy, mark)

    def close(self) -> None:
        with self._lock:
            warm = list(self._warm.values())
            self._warm.clear()
            keeper, self._keeper = self._keeper, None
            state, self._state = self._state, None
        for item in warm:
            item.destroy()
        self._allowlists.close()
        if keeper is not None:
            keeper.stop()  # removes the state directory (and anything a crash left in it)
        elif state is not None:
            shutil.rmtree(state, ignore_errors=True)


def _interpreter() -> str:
    """The Python that runs dsh: the sandbox sees it (read-only, with the rest of the host)."""
    return os.path.realpath(sys.executable)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _state_base() -> Path:
    """Where the caller keeps its sessions' bundles and runsc state: inside
    dsh-sandbox's own state directories, hidden from every run, never
    ``$TMPDIR`` or ``/tmp``.  Another sandboxed run of the same user that may
    write there (``--writable $TMPDIR``, a shared ``/tmp``) could otherwise
    rewrite a bundle's ``config.json`` between its writing and ``runsc
    create`` and add a writable mount of its choosing."""
    own, tried = first_own_dir(runner_state_candidates("gvisor", os.environ, os.geteuid()),
                               "gVisor state directory", _STATE_FIX)
    if own is None:
        raise SandboxUnavailable("no private directory for the gVisor sessions' state: tried " + "; ".join(tried)
                                 + "; " + _STATE_FIX, runner="gvisor")
    own.close()
    return own.path


_STATE_FIX = "set XDG_RUNTIME_DIR to a private directory (mode 0700) of yours"


def _runsc_root(state: Path) -> Path:
    """runsc's own state (``-root``) inside the session's directory."""
    return state / "runsc"
