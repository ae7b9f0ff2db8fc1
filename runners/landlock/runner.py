"""``LandlockRunner``: the ``Runner`` provider for Landlock + no_new_privs + seccomp."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.runners.landlock import abi
from dsh.runners.landlock.limited_spawn import LimitedSpawn
from dsh.runners.landlock.limits import (
    LimitPlan,
    plan_containment,
    plan_limits,
)
from dsh.runners.landlock.rules import ProtectedStrategy, RulePlan, build_ruleset, plan_rules
from dsh.runners.landlock.secrets import BundleFiles
from dsh.runners.landlock.spawner import SpawnerError, SpawnerThread
from dsh.runners.landlock.statements import (
    HARDENING,
    LOCAL_IPC,
    NETWORK_PORT_GAP,
    PRIVATE_TMP,
    PROCESS_LIST_GAP,
    ROOT_HARDENING,
    USER_HARDENING,
)
from dsh.runners.linux import bpf, seccomp
from dsh.runners.linux.allowlist_session import AllowlistSession
from dsh.runners.linux.cgroups import CgroupSession, join_args, join_shells
from dsh.runners.linux.env_hop import EnvHop
from dsh.runners.linux.net_namespace import plan_line
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.helper_env import helper_env
from dsh.sandbox.host_tools import policy_roots, refuse_writable_helpers
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.runner import (
    Enforcement,
    Gap,
    LocalLaunch,
    ProtectionCost,
    Runner,
    RunnerPlan,
    RunnerProbe,
    SpeedTargets,
    address_space_limitation,
)

if TYPE_CHECKING:
    import ssl

    from dsh.sandbox.net_proxy import Resolver

NAME = "landlock"


def _restrict_current_thread(ruleset_fd: int, arch: seccomp.Arch, syscalls: seccomp.SyscallPolicy) -> None:
    """Capabilities, no_new_privs, Landlock, then seccomp: on the calling thread only.

    The filter is compiled here, once per spawner thread: it names the
    thread's own tid, which only exists now.
    """
    abi.drop_all_capabilities(as_root=os.geteuid() == 0)
    bpf.set_no_new_privs()
    abi.restrict_self(ruleset_fd)
    guarded = dataclasses.replace(syscalls, guard_tid=threading.get_native_id())
    bpf.install(bpf.compile_bpf(seccomp.rules(guarded), arch))


class LandlockRunner(Runner):
    """Enforces a policy with Landlock on a restricted spawner thread per policy.

    Options: ``protected_paths`` = ``"parent"`` (default: writable roots are
    granted whole, protected paths inside them make enforcement partial) or
    ``"siblings"`` (write rights granted per entry around protected paths, so
    they stay read-only, at the cost of freezing their parent directories).
    ``unix_connect`` = ``"deny"`` (default: with network off, ``connect()``
    fails, so host daemons' unix sockets are out of reach; socketpairs work) or
    ``"allow"`` (unix-socket servers inside the sandbox work; connecting to a
    pathname socket outside is then possible and reported in ``explain``).
    """

    name: ClassVar[str] = NAME
    auto_priority: ClassVar[int | None] = 10
    SPEED_TARGETS = SpeedTargets(vs_local=1.3, concurrent_vs_local=0.7)
    # No mount namespace and /dev/ptmx, /dev/pts are outside the /dev allowlist:
    # a terminal session gets a pair the host opens for it (an inherited fd works).
    terminal_pty = "host"
    DEGRADATIONS: ClassVar[Mapping[str, tuple[cap.Capability, ...]]] = {
        "landlock-hidden-metadata": (cap.HIDDEN_METADATA,),
        "landlock-hidden-paths": (cap.HIDDEN_PATHS,),
        "landlock-limits": cap.LIMITS,
        "landlock-metadata": (cap.METADATA,),
        "landlock-network-by-port": (cap.NETWORK_BY_NAME,),
        "landlock-no-scopes": (cap.NO_SCOPES, cap.SIGNAL_SCOPE),
        "landlock-no-truncate": (cap.TRUNCATE,),
        "landlock-process-escape": (cap.PROCESS_ESCAPE,),
        "landlock-process-list": (cap.PROCESS_LIST,),
        "landlock-protected-paths": (cap.PROTECTED_PATHS,),
    }

    network_by_name: ClassVar[bool] = True
    network_secrets: ClassVar[bool] = True

    @classmethod
    def prune(cls, *, everything: bool = False) -> list[str] | None:
        """The CA bundle directories of sessions killed before they closed."""
        from dsh.runners.landlock.secrets import prune_bundles

        return prune_bundles(everything=everything)

    def __init__(self, options: Mapping[str, Any] | None = None, *, proxy_resolver: Resolver | None = None,
                 proxy_upstream_tls: ssl.SSLContext | None = None) -> None:
        """``proxy_resolver``: how the allowlist proxy resolves names (the
        system's unless given; tests map names to loopback servers);
        ``proxy_upstream_tls``: how it checks a secret's host (the system's
        CAs unless given; tests trust a loopback upstream's own CA)."""
        super().__init__(options)
        strategy = self.options.get("protected_paths", "parent")
        if strategy not in ("parent", "siblings"):
            raise ConfigError(
                f"runner option landlock.protected_paths: {strategy!r} is not valid; use 'parent' or 'siblings'"
            )
        self._strategy: ProtectedStrategy = strategy
        unix_connect = self.options.get("unix_connect", "deny")
        if unix_connect not in ("deny", "allow"):
            raise ConfigError(
                f"runner option landlock.unix_connect: {unix_connect!r} is not valid; use 'deny' or 'allow'"
            )
        self._unix_connect = unix_connect == "allow"
        self._lock = threading.Lock()
        self._plans: dict[SandboxPolicy, RulePlan] = {}
        self._spawners: dict[SandboxPolicy, SpawnerThread] = {}
        self._cgroups: CgroupSession | None = None
        self._allowlists = AllowlistSession(proxy_resolver, namespaced=False, upstream_tls=proxy_upstream_tls)
        self._bundles = BundleFiles()
        self._closed = False

    # -- probe -----------------------------------------------------------------

    def detect(self) -> RunnerProbe:
        status = abi.query_abi()
        if status.abi is None:
            return RunnerProbe(NAME, False, reason=status.reason)
        try:
            arch = seccomp.native_arch()
        except seccomp.UnsupportedArch as exc:
            return RunnerProbe(NAME, False, reason=str(exc), version=f"landlock ABI {status.abi}")
        # A real trial on a throwaway thread: a container may allow the ABI
        # query yet refuse restrict_self or seccomp.
        try:
            fd = abi.create_ruleset(status.abi, abi.rights_for_abi(abi.FS_RIGHTS, status.abi), 0, 0)
            try:
                strict = seccomp.SyscallPolicy(read_only=True)
                trial = SpawnerThread("dsh-landlock-probe", lambda: _restrict_current_thread(fd, arch, strict))
                trial.stop()
            finally:
                os.close(fd)
        except (OSError, SpawnerError) as exc:
            return RunnerProbe(
                NAME,
                False,
                version=f"landlock ABI {status.abi}",
                reason=f"Landlock ABI {status.abi} is present but restricting a thread failed: {exc}",
            )
        return RunnerProbe(
            NAME,
            True,
            version=f"landlock ABI {status.abi}",
            details={
                "abi": status.abi,
                "arch": arch.name,
                "handled_fs": abi.names_of(abi.FS_RIGHTS, abi.rights_for_abi(abi.FS_RIGHTS, status.abi)),
                "dropped": abi.unsupported(abi.FS_RIGHTS, status.abi)
                + abi.unsupported(abi.NET_RIGHTS, status.abi)
                + abi.unsupported(abi.SCOPES, status.abi),
                "local_ipc": LOCAL_IPC,
            },
        )

    def _require(self) -> int:
        probe = self.probe()
        if not probe.available:
            raise SandboxUnavailable(probe.reason or "Landlock is unavailable", runner=NAME)
        abi_version: int = probe.details["abi"]
        return abi_version

    # -- planning --------------------------------------------------------------

    def _rule_plan(self, policy: SandboxPolicy) -> RulePlan:
        abi_version = self._require()
        with self._lock:
            plan = self._plans.get(policy)
        if plan is None:
            plan = plan_rules(policy, abi_version, self._strategy)
            with self._lock:
                plan = self._plans.setdefault(policy, plan)
        return plan

    def protection_costs(self, policy: SandboxPolicy) -> list[ProtectionCost]:
        from dsh.runners.linux.costs import cgroup_costs, filter_cost

        abi_version = self._require()

        def ruleset() -> None:
            # Planned afresh (a session plans once per policy) and built through the pins, as a spawner does.
            plan = plan_rules(policy, abi_version, self._strategy)
            with self.pinned(policy) as pins:
                os.close(build_ruleset(plan, pins))

        return [
            ProtectionCost("rules planned and the Landlock ruleset built", ruleset, "CLI run"),
            *filter_cost("syscall filter compiled", self._syscall_policy(policy), "CLI run"),
            *cgroup_costs("dsh-bench-landlock"),
        ]

    def _limit_plan(self, policy: SandboxPolicy) -> LimitPlan:
        if policy.limits.is_empty() and not policy.constrained:
            return LimitPlan()
        with self._lock:
            if self._cgroups is None:
                self._cgroups = CgroupSession("dsh-landlock")
            cgroups = self._cgroups
        plan = plan_limits(policy.limits, cgroups, is_root=os.geteuid() == 0)
        return plan_containment(plan, cgroups) if policy.constrained else plan

    def _gaps(self, policy: SandboxPolicy) -> tuple[Gap, ...]:
        limit_gaps = self._limit_plan(policy).gaps
        if not policy.constrained:
            return limit_gaps
        network = (NETWORK_PORT_GAP,) if policy.network_allowlist is not None else ()
        return self._rule_plan(policy).gaps + limit_gaps + (PROCESS_LIST_GAP,) + network

    def refuses_network_of(self, policy: SandboxPolicy) -> str | None:
        if not policy.constrained or policy.network_allowlist is None:
            return None
        probe = self.probe()
        if probe.available and probe.details["abi"] < 4:
            return (f"Landlock ABI {probe.details['abi']} has no network rules (ABI 4), so the command cannot be "
                    "limited to the allowlist's proxy; nothing ran: run with --runner bwrap (or auto)")
        return None

    def network_mark(self, policy: SandboxPolicy) -> int:
        return self._allowlists.mark(policy)

    def network_refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        return self._allowlists.refused(policy, mark)

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        gaps = self._gaps(policy)
        if not gaps:
            return Enforcement.full()
        return Enforcement.partial(gaps)

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        memory = policy.limits.max_memory_bytes
        per_process = memory is not None and any(f.startswith("--as=") for f in self._limit_plan(policy).prlimit)
        found = address_space_limitation(memory) if memory is not None and per_process else {}
        if not policy.constrained:
            return found
        # Without namespaces the host's /dev/shm, unix sockets and loopback are
        # the command's only ones, so they stay closed and this work cannot run.
        found = {cap.LOCAL_IPC.name: LOCAL_IPC, **found}
        if policy.private_tmp is not None:
            found[cap.TMP_PATH.name] = PRIVATE_TMP.format(policy.private_tmp)
        return found

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        limits = self._limit_plan(policy)
        limit_lines = limits.described + ((limits.prlimit[0] + " wraps the argv",) if limits.prlimit else ())
        if not policy.constrained:
            return RunnerPlan(
                NAME,
                policy.mode,
                ("no restriction (danger-full-access)",),
                "on (unrestricted)",
                limit_lines,
                tuple(g.reason for g in limits.gaps),
            )
        probe = self.probe()
        if not probe.available:
            return RunnerPlan(
                NAME,
                policy.mode,
                (),
                "unknown",
                limit_lines,
                (f"Landlock unavailable: {probe.reason}",),
            )
        plan = self._rule_plan(policy)
        rules = plan.describe_rules() + tuple(f"note: {n}" for n in plan.notes)
        if policy.network:
            network = "on: no network restriction"
        elif policy.network_allowlist is not None:
            network = (
                plan_line(policy.network_allowlist, "127.0.0.1 on a port the kernel picks per session")
                + "; seccomp allows TCP sockets only, and Landlock connect() to the proxy's port only; bind(), "
                "listen() and TCP Fast Open are refused"
            )
        else:
            network = (
                "off: seccomp makes socket() fail with EACCES for every family"
                + (" but AF_UNIX stream/seqpacket" if self._unix_connect else "")
                + "; socketpair() only gives AF_UNIX stream/seqpacket pairs (no datagram socket can "
                "sendto() a host socket)"
                + ("; Landlock handles TCP bind/connect with no port allowed" if plan.handled_net else "")
            )
        if not policy.network and not self._unix_connect:
            network += (
                "; connect() fails on every socket (unix sockets of host daemons are out of reach); bind() and "
                "listen() fail too (no name in the host's abstract unix namespace can be taken)"
            )
        if plan.scoped:
            network += "; abstract unix sockets and signals are scoped to the sandbox"
        rules += HARDENING + (ROOT_HARDENING if os.geteuid() == 0 else USER_HARDENING)
        cannot = tuple(g.reason for g in plan.gaps + limits.gaps)
        cannot += tuple(f"right not known to ABI {plan.abi}, dropped: {d}" for d in plan.dropped)
        if not policy.network and self._unix_connect:
            cannot += (
                "connect() to pathname unix sockets outside the sandbox (e.g. /var/run/docker.sock) "
                "is not mediated by Landlock ABI <= 7, and bind() can take a name a host daemon or client "
                "uses in the host's abstract unix namespace (runner option unix_connect='allow')",
            )
        cannot += ("names and metadata (stat) of every path stay visible: Landlock does not mediate lookup",)
        if policy.state_paths:
            cannot += ("dsh-sandbox's own state (other workspaces' HOMEs, spill files) is unreadable, but its "
                       "names stay visible",)
        cannot += tuple(self.limitations(policy).values())
        return RunnerPlan(NAME, policy.mode, rules, network, limit_lines, cannot)

    # -- launching -------------------------------------------------------------

    def _syscall_policy(self, policy: SandboxPolicy) -> seccomp.SyscallPolicy:
        # No namespaces: the command shares the host's network, pid and IPC
        # spaces, so the filter keeps it off what they would have isolated.
        return seccomp.SyscallPolicy(
            network=policy.network,
            read_only=policy.mode is SandboxMode.READ_ONLY,
            unix_sockets=self._unix_connect,
            proxy_client=policy.network_allowlist is not None,
        )

    def _spawner(self, policy: SandboxPolicy) -> SpawnerThread:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the runner is closed", runner=NAME)
            spawner = self._spawners.get(policy)
        if spawner is not None and spawner.alive:
            return spawner
        setup: Callable[[], None] | None = None
        fd = -1
        if policy.constrained:
            plan = self._rule_plan(policy)
            arch = seccomp.native_arch()
            # Children share the spawner thread's domain, and the thread shares
            # this process's memory: keep them out of /proc/<pid>/{mem,environ}.
            abi.set_process_undumpable()
            # The proxy exists before the rules: they name its port, and the CA
            # bundle's file (the plan may not grant a directory made after it).
            ports: tuple[int, ...] = ()
            bundles: tuple[str, ...] = ()
            if policy.network_allowlist is not None:
                entry = self._allowlists.enter(policy, NAME)
                ports = (entry.port,)
                if entry.ca_bundle is not None:
                    bundles = (self._bundles.path(entry.ca_bundle),)
            with self.pinned(policy) as pins:
                fd = build_ruleset(plan, pins, ports, bundles)
            syscalls = self._syscall_policy(policy)
            setup = lambda: _restrict_current_thread(fd, arch, syscalls)  # noqa: E731
        try:
            spawner = SpawnerThread(f"dsh-landlock-{policy.mode.value}", setup)
        except SpawnerError as exc:
            raise SandboxUnavailable(f"could not restrict the spawner thread: {exc}", runner=NAME) from exc
        finally:
            if fd >= 0:
                os.close(fd)
        with self._lock:
            current = self._spawners.get(policy)
            if current is not None and current.alive:
                spawner.stop()  # lost a race; keep the one others may already use
                return current
            self._spawners[policy] = spawner
        return spawner

    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> LocalLaunch:
        exact = argv
        limits = self._limit_plan(policy)
        if not policy.constrained and limits == LimitPlan():
            return LocalLaunch(argv=exact)  # danger-full-access: nothing to apply
        refuse_writable_helpers((*limits.prlimit[:1], *join_shells()), policy_roots(policy), runner=NAME)
        spawner = self._spawner(policy)
        added: Mapping[str, str] = {}
        if policy.constrained and policy.network_allowlist is not None:
            entry = self._allowlists.enter(policy, NAME)
            added = dict(entry.env)
            if entry.ca_bundle is not None:
                # The placeholders win over a variable the profile passes through.
                added.update(self._bundles.environment(dict(entry.secret_env), entry.ca_bundle))
            env = {**env, **added}
            entry.refuse_values_in(env, NAME)
        if not limits.prlimit and not limits.needs_cgroup and limits.wall_time_s is None:
            return LocalLaunch(argv=exact, spawn_in=spawner.call, env=added)
        cgroups = self._cgroups if limits.needs_cgroup else None
        try:
            limited = LimitedSpawn(spawner, cgroups, limits)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot create the command's cgroup: {exc}; nothing ran", runner=NAME) from exc
        try:
            join = tuple(join_args(limited.join_fds)) if limited.join_fds else ()
        except OSError as exc:
            limited.cleanup()
            raise SandboxUnavailable(f"cannot join the command's cgroup: {exc}; nothing ran", runner=NAME) from exc
        if not join and not limits.prlimit:
            return LocalLaunch(argv=exact, spawn_in=limited.spawn_in, env=added,
                               kill_tree=limited.kill_tree if cgroups is not None else None,
                               cleanup=limited.cleanup)
        # The join shell and prlimit run before the command: a loader variable
        # of the command's could make them skip the join or the limits.  They
        # start with a fixed environment; the hop hands the command its own.
        try:
            limited.hop = EnvHop(env)
        except OSError as exc:
            limited.cleanup()
            raise SandboxUnavailable(f"cannot hand the command its environment: {exc}; nothing ran",
                                     runner=NAME) from exc
        return LocalLaunch(
            argv=(*join, *limits.prlimit, *limited.hop.args, *exact),
            spawn_in=limited.spawn_in,
            env=added,
            spawn_env=helper_env(),
            pass_fds=(*limited.join_fds, limited.hop.fd),
            kill_tree=limited.kill_tree if cgroups is not None else None,
            cleanup=limited.cleanup,
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            spawners = list(self._spawners.values())
            self._spawners.clear()
            cgroups, self._cgroups = self._cgroups, None
        for spawner in spawners:
            spawner.stop()
        self._allowlists.close()
        self._bundles.close()
        if cgroups is not None:
            cgroups.close()


__all__ = ["LandlockRunner", "signal"]
