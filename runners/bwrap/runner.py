"""``BwrapRunner``: enforce a ``SandboxPolicy`` with bubblewrap.

The sandbox sees the host read-only (``--ro-bind / /``), a fresh ``/dev`` (so
``/dev/null`` stays writable and ``/dev/shm`` is private) and ``/proc`` of its
own pid namespace, its kernel tunables read-only and kernel leaks masked
(``kernel``); the mounts of ``mounts.plan_mounts`` make the writable roots
writable and keep protected, read-only and hidden paths as the policy says.

Namespaces and privileges: a user namespace with further user namespaces
disabled (``--disable-userns``: nested ``unshare``/``mount`` fail), every
capability dropped when bwrap runs as root (otherwise a root bwrap keeps them
all), pid/ipc/uts/cgroup namespaces, network namespace when the network is off,
``--new-session`` (no controlling tty: TIOCSTI cannot inject), and
``--die-with-parent`` (killing bwrap ends the pid namespace, so nothing started
by ``setsid`` or a double fork survives).  bwrap always sets no_new_privs, so
setuid binaries gain nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from dsh.runners.bwrap import filter as syscall_filter
from dsh.runners.bwrap.environ import env_args_fd
from dsh.runners.bwrap.host_facts import (
    BASE_MOUNTS,
    HostFacts,
    limit_gaps,
    limit_lines,
    namespace_args,
    probe_host,
    snapshot_args,
)
from dsh.runners.bwrap.lifecycle import SandboxLifecycle
from dsh.runners.bwrap.limits import (
    BWRAP_OVERHEAD_PIDS,
    rlimit_args,
    timeout_args,
)
from dsh.runners.bwrap.materialize import OpenedMounts, open_mounts
from dsh.runners.bwrap.mounts import MountPlan, plan_mounts
from dsh.runners.linux.allowlist_session import AllowlistSession
from dsh.runners.linux.cgroups import CgroupSession, CommandCgroup, Limits, join_args, join_shells
from dsh.runners.linux.env_hop import EnvHop
from dsh.runners.linux.ipc import namespaced_limitations
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.helper_env import helper_env
from dsh.sandbox.host_tools import policy_roots, refuse_writable_helpers
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.runner import (
    EXEC_CHECK_SH,
    Argv,
    Baseline,
    Enforcement,
    Gap,
    Launch,
    LocalLaunch,
    ProtectionCost,
    Runner,
    RunnerPlan,
    RunnerProbe,
    SpeedTargets,
    address_space_limitation,
)

if TYPE_CHECKING:
    # The allowlist's proxy (asyncio and all) is imported only by a run that asks for it.
    import ssl

    from dsh.runners.linux.allowlist_networks import Entry
    from dsh.sandbox.net_proxy import Resolver

#: How long a plan made for the gate stays good for the launch right after it.
PLAN_REUSE_S = 1.0


def _runs_here(command: Argv, env: Mapping[str, str], cwd: str) -> bool:
    """Does the host find ``command[0]`` as an executable file (the sandbox sees
    the host's files read-only, so then it almost surely runs)?"""
    program = os.fsdecode(command[0])
    if "/" in program:
        path = os.path.join(cwd, program)
        return os.path.isfile(path) and os.access(path, os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


def _exited(pid: int) -> bool:
    """Has the child ``pid`` exited?  Asked without reaping it (``Popen.poll``
    would): the executor still waits for its status, and a reaped pid is
    one it can no longer watch ("No such process" instead of bwrap's own error)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _admitted(life: SandboxLifecycle) -> Callable[[Callable[[], Any]], Any]:
    """Spawn bwrap, then hold its command back until the sandbox's mounts are
    checked (``SandboxLifecycle.admit``); a refused sandbox is reaped here."""

    def spawn_in(spawn: Callable[[], Any]) -> Any:
        proc = spawn()
        try:
            life.admit(proc.pid, lambda: _exited(proc.pid))
        except BaseException:
            life.kill_tree(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return proc

    return spawn_in


class BwrapRunner(Runner):
    name = "bwrap"
    auto_priority: ClassVar[int | None] = 20
    network_by_name: ClassVar[bool] = True
    network_secrets: ClassVar[bool] = True
    SPEED_TARGETS = SpeedTargets(vs_baseline=1.3)
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "bwrap-limit-file-size": (cap.LIMITS_FILE_SIZE,),
        "bwrap-limit-memory": (cap.LIMITS_MEMORY,),
        # No longer declared (a per-process limit is a limitation, address-space);
        # still a known name so profiles that accept it keep validating.
        "bwrap-limit-memory-per-process": (cap.LIMITS_MEMORY,),
        "bwrap-limit-processes": (cap.LIMITS_PROCESSES,),
        "bwrap-limit-wall-time": (cap.LIMITS_WALL_TIME,),
        "bwrap-protected-symlink": (cap.PROTECTED_PATHS,),
        "bwrap-syscall-filter": (cap.SYSCALL_FILTER, cap.SOCKET_FAMILIES, cap.IO_URING, cap.KEYRING),
        "bwrap-wall-time-orphan": (cap.PROCESS_ESCAPE,),
    }

    def __init__(self, options: Mapping[str, Any] | None = None, *, proxy_resolver: Resolver | None = None,
                 proxy_upstream_tls: ssl.SSLContext | None = None) -> None:
        """``proxy_resolver``: how the allowlist proxy resolves names (the
        system's resolver unless given; tests map names to loopback servers);
        ``proxy_upstream_tls``: how it checks a secret's host (the system's
        trust unless given; tests trust a loopback server's own CA)."""
        super().__init__(options)
        self._allowlists = AllowlistSession(proxy_resolver, upstream_tls=proxy_upstream_tls)
        self._lock = threading.Lock()
        self._facts: HostFacts | None = None
        self._session: CgroupSession | None = None
        # The plan ``enforcement`` judged, for the ``wrap`` that follows it on
        # the same thread: planning walks the policy's paths, and doing it twice
        # was a tenth of a short run.
        self._planned = threading.local()

    # -- probe ----------------------------------------------------------------------
    def facts(self) -> HostFacts:
        with self._lock:
            if self._facts is None:
                self._session = CgroupSession("dsh-bwrap")
                self._facts = probe_host(self.options.get("bwrap"), self._session)
            return self._facts

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()
        self._allowlists.close()

    def network_mark(self, policy: SandboxPolicy) -> int:
        return self._allowlists.mark(policy)

    def network_refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        return self._allowlists.refused(policy, mark)

    def detect(self) -> RunnerProbe:
        f = self.facts()
        details: dict[str, Any] = {
            "path": f.bwrap,
            "root": f.is_root,
            "cgroup_version": f.cgroups.version,
            "cgroup_pids": f.cgroups.pids_parent is not None,
            "cgroup_memory": f.cgroups.memory_parent is not None,
            "prlimit": f.prlimit,
        }
        return RunnerProbe(self.name, f.works, f.reason, f.version, details)

    # -- enforcement --------------------------------------------------------------------
    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        if not policy.constrained:
            return Enforcement.full()
        plan = plan_mounts(policy)
        self._planned.last = (policy, time.monotonic(), plan)
        facts = self.facts()
        gaps = [*plan.degradations, *limit_gaps(policy.limits, facts)]
        if facts.works and facts.syscalls.memfd is None:
            gaps.append(Gap(
                syscall_filter.DEGRADATION,
                f"no seccomp filter ({facts.syscalls.reason}): keyrings, io_uring, AF_VSOCK, netlink "
                "and host unix sockets stay reachable",
            ))
        if not gaps:
            return Enforcement.full()
        return Enforcement.partial(gaps)

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        facts = self.facts()
        if not policy.constrained:
            return RunnerPlan(
                self.name,
                policy.mode,
                ("no sandbox: command runs as is",),
                "on: host network",
                tuple(limit_lines(policy.limits, facts)),
                (),
            )
        plan = plan_mounts(policy)
        rules = [
            "ro-bind / / (everything read-only)",
            "dev /dev (fresh: /dev/null writable, /dev/shm private)",
            "proc /proc (own pid namespace)",
            *facts.kernel.describe(),
            *(m.describe() for m in plan.mounts),
            *plan.overridden,
            "namespaces: user (nested disabled), pid, ipc, uts, cgroup" + ("" if policy.network else ", net")
            + (" (made by the host, holding only the allowlist proxy)" if policy.network_allowlist else ""),
            "no capabilities, no_new_privs, new session (no controlling tty), die with parent",
            syscall_filter.describe(),
        ]
        network = "on: host network shared" if policy.network else "off: --unshare-net (own loopback only)"
        if policy.network_allowlist is not None:
            from dsh.runners.linux.net_namespace import plan_line

            network = plan_line(policy.network_allowlist)
        cannot = [msg for msg in self.enforcement(policy).missing]
        cannot += [f"writable root {p} does not exist: not bound" for p in policy.missing_roots]
        cannot += self.limitations(policy).values()
        if not facts.works:
            cannot.insert(0, f"bwrap unavailable: {facts.reason}")
        return RunnerPlan(
            self.name, policy.mode, tuple(rules), network, tuple(limit_lines(policy.limits, facts)), tuple(cannot)
        )

    def baseline(self, policy: SandboxPolicy, cwd: str) -> Baseline:
        """The same bwrap argv ``prepare`` builds, spawned bare (no executor around it)."""
        launch = self.prepare(("true",), policy, cwd=cwd, env={})
        assert isinstance(launch, LocalLaunch)
        # Bare: without the block fd that holds the command until dsh has
        # checked the mounts (that check is dsh's cost, measured against this).
        argv = list(launch.argv)
        if "--block-fd" in argv:
            at = argv.index("--block-fd")
            del argv[at:at + 2]

        def spawn() -> None:
            # A launch is made for one spawn: bwrap reads its --seccomp fd to the
            # end, so rewind what can be rewound to reuse the same argv.
            for fd in launch.pass_fds:
                with contextlib.suppress(OSError):
                    os.lseek(fd, 0, os.SEEK_SET)
            subprocess.run(argv, check=True, pass_fds=launch.pass_fds, env=launch.spawn_env)

        return Baseline("bare bwrap true", spawn, launch.cleanup)

    def protection_costs(self, policy: SandboxPolicy) -> list[ProtectionCost]:
        from dsh.runners.linux.costs import cgroup_costs, filter_cost

        option = self.options.get("bwrap")
        return [
            # Once per process: what bwrap and the kernel allow here, found by a trial sandbox.
            ProtectionCost("host probe (trial sandbox, bwrap --version)",
                           lambda: probe_host(option, None, remembered=False), "CLI run"),
            # What a CLI run pays once a trial under the same key worked.
            ProtectionCost("host probe, a trial remembered", lambda: probe_host(option, None), "CLI run"),
            *filter_cost("syscall filter compiled", syscall_filter.BWRAP_SYSCALLS, "CLI run"),
            *cgroup_costs("dsh-bench-bwrap"),
        ]

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        found = dict(namespaced_limitations(policy.constrained))
        memory = policy.limits.max_memory_bytes
        if memory is not None:
            facts = self.facts()
            if facts.cgroups.memory_parent is None and facts.prlimit is not None:
                found.update(address_space_limitation(memory))
        return found

    def reporting_gaps(self, policy: SandboxPolicy) -> Mapping[str, str]:
        if not policy.constrained:
            return {}
        return {
            cap.SIGNAL_STATUS.name: "bwrap reports a command killed by signal N as exit status 128+N "
            "(its monitor exits; it cannot die by the same signal)"
        }

    def _plan_for_launch(self, policy: SandboxPolicy) -> MountPlan:
        """The plan ``enforcement`` just made for this very policy on this
        thread (what was gated is what is mounted), else a new one.  Taken
        once, and only while fresh: a later launch plans anew."""
        last, self._planned.last = getattr(self._planned, "last", None), None
        if last is not None and last[0] is policy and time.monotonic() - last[1] < PLAN_REUSE_S:
            return cast(MountPlan, last[2])
        return plan_mounts(policy)

    # -- launch --------------------------------------------------------------------------
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        command = argv
        facts = self.facts()
        if facts.bwrap is None:  # the probe said available: bwrap was found then
            raise SandboxUnavailable(facts.reason or "bwrap unavailable", runner=self.name)
        entry = None
        if policy.constrained and policy.network_allowlist is not None:
            entry = self._allowlists.enter(policy, self.name)
            env = {**env, **entry.env}
        try:
            if entry is not None and entry.ca_bundle is not None:
                from dsh.runners.bwrap.secrets import secret_environment

                # The placeholders win over a variable the profile passes through.
                env = {**env, **secret_environment(dict(entry.secret_env))}
                entry.refuse_values_in(env, self.name)
            return self._wrap_entered(command, policy, cwd=cwd, env=env, facts=facts, entry=entry)
        except BaseException:
            if entry is not None:
                entry.close()
            raise

    def _wrap_entered(self, command: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
                      env: Mapping[str, str], facts: HostFacts, entry: Entry | None) -> Launch:
        refuse_writable_helpers(
            (facts.bwrap, facts.unshare, facts.prlimit, facts.timeout, facts.setpriv, *join_shells(),
             *((entry.python,) if entry is not None else ())),
            policy_roots(policy),
            runner=self.name,
        )
        filter_fd = -1
        if policy.constrained and facts.syscalls.memfd is not None:
            filter_fd = facts.syscalls.open_for_launch()
        group = None
        env_fd = -1
        try:
            # The helpers start with a fixed environment; the command's reaches
            # only the command, through bwrap's --setenv (or the hop without bwrap).
            group = self._cgroup(policy.limits, facts)
            if policy.constrained:
                with self.pinned(policy) as pins:
                    opened = open_mounts(self._plan_for_launch(policy), pins)
                if entry is not None and entry.ca_bundle is not None:
                    from dsh.runners.bwrap.secrets import bundle_args, sealed_bundle

                    # Closed with the mounts' fds, after the run.
                    try:
                        opened.fds.append(bundle_fd := sealed_bundle(entry.ca_bundle))
                    except BaseException:
                        opened.close()
                        raise
                    opened.args += bundle_args(bundle_fd)
                # The mounts go with the environment, through bwrap's --args:
                # no argv limit applies however many there are.
                try:
                    env_fd = env_args_fd(env, [*BASE_MOUNTS, *facts.kernel.args, *opened.args])
                except BaseException:
                    opened.close()
                    raise
            else:
                opened = OpenedMounts()
            life = SandboxLifecycle(opened, group, self._session, bwrap=policy.constrained, seccomp_fd=filter_fd,
                                    env_fd=env_fd)
        except BaseException:
            if group is not None and self._session is not None:
                self._session.release(group)
            for fd in (filter_fd, env_fd):
                if fd != -1:
                    os.close(fd)
            raise
        inner: list[str] = []
        if policy.constrained:
            if facts.unshare is None or facts.bwrap is None:  # the probe already refuses such a host
                raise SandboxUnavailable("unshare or bwrap not found; install util-linux and bubblewrap",
                                         runner=self.name)
            inner = [
                *(entry.prefix if entry is not None else ()),
                *snapshot_args(facts.unshare, is_root=facts.is_root),
                facts.bwrap,
                # In the allowlist's namespace: no network namespace of its own.
                *namespace_args(network=policy.network or entry is not None, is_root=facts.is_root),
                "--info-fd",
                str(life.info_write),
                "--json-status-fd",
                str(life.status_write),
                "--block-fd",
                str(life.block_read),
                "--args",
                str(env_fd),
                *(["--seccomp", str(filter_fd)] if filter_fd != -1 else []),
                "--chdir",
                os.path.abspath(cwd),
                "--",
            ]
        try:
            wrappers = self._limit_wrappers(policy.limits, facts, life.join_fds)
        except OSError as exc:
            life.cleanup()
            raise SandboxUnavailable(f"cannot join the limits cgroup: {exc}; nothing ran", runner=self.name) from None
        if policy.constrained and not _runs_here(command, env, cwd):
            # bwrap would print its own ``bwrap: execvp X: ...``; the check in
            # the sandbox says it as every runner does (and looks it up there).
            command = ("/bin/sh", "-c", EXEC_CHECK_SH + 'exec "$@"', "sh", *command)
        if wrappers and not inner:
            try:
                hop = EnvHop(env)
            except OSError as exc:
                life.cleanup()
                raise SandboxUnavailable(f"cannot hand the command its environment: {exc}; nothing ran",
                                         runner=self.name) from None
            life.env_fd = hop.fd
            inner = list(hop.args)
        helpers = bool(wrappers or inner)
        cleanup = life.cleanup
        if entry is not None:
            def cleanup() -> None:
                try:
                    life.cleanup()
                finally:
                    entry.close()
        return LocalLaunch(
            argv=(*wrappers, *inner, *command),
            spawn_in=_admitted(life) if policy.constrained else None,
            spawn_env=helper_env() if helpers else None,
            pass_fds=(*life.pass_fds, *(entry.fds if entry is not None else ())),
            kill_tree=life.kill_tree,
            cleanup=cleanup,
            exit_status=life.exit_status if policy.constrained else None,
        )

    def _cgroup(self, limits: ResourceLimits, facts: HostFacts) -> CommandCgroup | None:
        """A cgroup only for limits: without one, --die-with-parent and the pid
        namespace already hold every process of the sandbox."""
        cg = facts.cgroups
        overhead = BWRAP_OVERHEAD_PIDS + (1 if limits.wall_time_s is not None else 0)
        pids = limits.max_processes + overhead if limits.max_processes is not None else None
        pids = pids if cg.pids_parent else None
        memory = limits.max_memory_bytes if cg.memory_parent else None
        if (pids is None and memory is None) or self._session is None:
            return None
        try:
            return self._session.command(Limits(pids_max=pids, memory_max=memory))
        except OSError as exc:
            raise SandboxUnavailable(f"cannot create the limits cgroup: {exc}", runner=self.name) from None

    @staticmethod
    def _limit_wrappers(limits: ResourceLimits, facts: HostFacts, join_fds: list[int]) -> list[str]:
        cg = facts.cgroups
        nproc = limits.max_processes if cg.pids_parent is None and not facts.is_root else None
        address_space = limits.max_memory_bytes if cg.memory_parent is None else None
        out = join_args(join_fds) if join_fds else []
        if facts.prlimit is not None:
            out += rlimit_args(
                facts.prlimit,
                nproc=nproc,
                address_space=address_space,
                file_size=limits.max_file_size_bytes,
            )
        if facts.timeout is not None:
            out += timeout_args(facts.timeout, limits.wall_time_s, facts.setpriv)
        return out
