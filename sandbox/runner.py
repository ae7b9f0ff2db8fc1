"""The runner contract: how a sandbox technology enforces a ``SandboxPolicy``.

Definition of the runner seam.  Providers live in ``dsh.runners.*`` and are found
by name through the ``dsh_sandbox.runners`` entry-point group; the consumer is
``SandboxHost`` (``ctx.require(SandboxHost)``), which the sandboxed executors call.

A runner answers a ``prepare()`` with one of two launches:

- ``LocalLaunch``: a wrapped local argv (bwrap, sandbox-exec) and optionally a
  *spawn context* in which the local process must be created (Landlock applies
  its ruleset to a dedicated thread; children forked there inherit it).  The
  subprocess service spawns it like any other command.
- ``RemoteLaunch``: a process-like handle (Docker exec, E2B command) that the
  subprocess service drives exactly like a local process: its stdout/stderr are
  OS pipe fds fed by the runner, it can be waited on and killed.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from dsh.sandbox.capability import ADDRESS_SPACE, Capability
from dsh.sandbox.errors import SandboxUnavailable, UsageError

# The gate owns what a runner reports and the check on it; re-exported as the runner vocabulary.
from dsh.sandbox.gate import Enforcement as Enforcement
from dsh.sandbox.gate import Gap as Gap
from dsh.sandbox.gate import check_accepted

# What a runner hands back: re-exported as the runner vocabulary.
from dsh.sandbox.launch import EXEC_CHECK_SH as EXEC_CHECK_SH
from dsh.sandbox.launch import EXIT_NOT_EXECUTABLE as EXIT_NOT_EXECUTABLE
from dsh.sandbox.launch import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from dsh.sandbox.launch import ExitStatus as ExitStatus
from dsh.sandbox.launch import Launch as Launch
from dsh.sandbox.launch import LocalLaunch as LocalLaunch
from dsh.sandbox.launch import RemoteLaunch as RemoteLaunch
from dsh.sandbox.launch import RemoteProcess as RemoteProcess
from dsh.sandbox.launch import exec_failure_status as exec_failure_status
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.pins import PinnedPaths, PinSource, policy_pins
from dsh.sandbox.policy import SandboxPolicy

T = TypeVar("T")
_DETECT_LOCK = threading.Lock()
Argv = Sequence[str | bytes]


@dataclass(frozen=True)
class RunnerProbe:
    """Whether a runner works on this machine, and why not."""

    name: str
    available: bool
    reason: str | None = None  # set when not available: what a person can do about it
    version: str | None = None  # e.g. "bubblewrap 0.8.0", "landlock ABI 7"
    details: Mapping[str, Any] = field(default_factory=dict)


def exact_argv(argv: Argv) -> tuple[str | bytes, ...]:
    """``argv`` as a tuple, refused unless it names a program and every item is str or bytes."""
    exact = tuple(argv)
    if not exact:
        raise UsageError("argv: the command is empty; pass the program and its arguments")
    for item in exact:
        if not isinstance(item, str | bytes):
            raise UsageError(f"argv: item {item!r} is {type(item).__name__}; use str or bytes")
    return exact


def address_space_limitation(max_memory_bytes: int) -> dict[str, str]:
    """``limitations()`` entry of a runner whose memory limit is ``RLIMIT_AS`` per process."""
    return {ADDRESS_SPACE.name: (
        f"max_memory ({max_memory_bytes} bytes) is RLIMIT_AS per process (no memory cgroup): runtimes that "
        "reserve large virtual ranges up front (Node/V8, Go, the JVM) cannot start under a small one; "
        "raise or drop max_memory for them")}


@dataclass(frozen=True)
class RunnerPlan:
    """What ``profile explain`` prints: what will be enforced, and what cannot be."""

    runner: str
    mode: SandboxMode
    rules: tuple[str, ...]  # rules, mounts or SBPL lines, one per item
    network: str
    limits: tuple[str, ...]
    cannot: tuple[str, ...]  # each with the reason


@dataclass(frozen=True)
class Baseline:
    """What a runner's cost is measured against (``dsh-sandbox bench``): the same
    isolation started the cheapest way, without dsh around it.  ``run`` starts
    ``true`` once; ``close`` releases what it holds; ``slow`` asks for fewer samples."""

    label: str
    run: Callable[[], object]
    close: Callable[[], None] | None = None
    slow: bool = False


@dataclass(frozen=True)
class ProtectionCost:
    """One protection's own work, timed alone by ``dsh-sandbox bench`` so that a
    change making it dearer shows in the change that caused it.  ``run`` does
    the work once; ``per`` says how often a run pays it (``"CLI run"``: once
    per session, so once per ``dsh-sandbox run``; ``"command"``: every
    command); ``close`` releases what the measure holds."""

    label: str
    run: Callable[[], object]
    per: str = "command"
    close: Callable[[], None] | None = None


@dataclass(frozen=True)
class SpeedTargets:
    """What ``dsh-sandbox bench`` reports a runner's cost against; never enforced.

    ``vs_local``: ``NAME true`` through the executor over ``bash-local true``
    (at most).  ``vs_baseline``: the same over the runner's ``baseline()`` (at
    most).  ``concurrent_vs_local``: 32 concurrent commands per second over
    bash-local's (at least).
    """

    vs_local: float | None = None
    vs_baseline: float | None = None
    concurrent_vs_local: float | None = None


@dataclass(frozen=True)
class ConfigKey:
    """One option of a runner that a user config file may set (``[runners.NAME] KEY = "..."``).

    Every value is a non-empty string.  A key named ``image`` is what ``--image`` sets.
    """

    help: str
    #: Shown in the fix of an error: ``write KEY = "EXAMPLE"``.
    example: str = "..."
    #: The value names an environment variable whose value becomes this option:
    #: a secret is never written in a config file, only where to find it.
    env_for: str | None = None
    #: Why a project config setting it weakens the sandbox (``None``: it does not).
    weakens: str | None = None


#: Why a runner without ``network_by_name`` refuses a policy with an allowlist.
NOT_BY_NAME = ("this runner cannot limit the network to named hosts (bwrap can); nothing ran: run with "
               "--runner bwrap (or auto), or turn the network off or on")
#: Why a runner without ``network_secrets`` refuses a policy whose allowlist has secrets.
NO_SECRETS = ("this runner cannot keep secrets out of the sandbox (bwrap, docker and landlock can); nothing ran: run "
              "with --runner bwrap (or auto), or remove [[network.secrets]] from the profile")


class Runner(abc.ABC):
    """A sandbox technology.  One instance per ``SandboxHost`` (per session).

    A runner is registered as an entry point of ``dsh_sandbox.runners`` and
    declares what the host needs to know before it runs anything (class
    attributes, so nothing is probed to learn them).
    """

    name: ClassVar[str]
    #: Name of the pip extra that provides the runner's SDK, if any.
    extra: ClassVar[str | None] = None
    #: ``runner=auto`` tries runners in increasing priority; ``None`` means only
    #: when configured by name or listed in a profile's ``allowed_runners``.
    auto_priority: ClassVar[int | None] = None
    #: Commands run in the runner's own image or machine (a workspace copy or
    #: bind): this host's PATH says nothing about which programs they find.
    remote: ClassVar[bool] = False
    #: Commands run on another kernel: nothing of this host's kernel is in reach.
    separate_kernel: ClassVar[bool] = False
    #: It can limit the network to named hosts (``SandboxPolicy.network_allowlist``);
    #: a runner that cannot refuses such a policy rather than run it with the network off or on.
    network_by_name: ClassVar[bool] = False
    #: It can hold an allowlist's secrets (``NetworkRules.secrets``): the command gets
    #: placeholders and the session CA, the proxy the values.  One that cannot refuses.
    network_secrets: ClassVar[bool] = False
    #: Where a terminal session's pty is allocated: ``sandbox`` (the sandbox has
    #: a ``/dev/ptmx`` of its own, so TIOCSTI and job control stay inside) or
    #: ``host`` (it cannot open one: the host opens the session's own pair and
    #: passes it in; never the caller's terminal) or ``runner`` (the sandbox's own
    #: PTY API allocates it: no relay runs; ``wrap_terminal`` takes the frames of
    #: ``terminal_frames`` on stdin and writes its status lines on stderr).
    terminal_pty: ClassVar[Literal["sandbox", "host", "runner"]] = "sandbox"
    #: Every degradation name ``enforcement`` can report -> the capabilities it
    #: weakens.  A profile's ``accept_degraded`` is checked against the union over
    #: the runners, so a misspelt name is an error instead of a silent no-op.
    DEGRADATIONS: ClassVar[Mapping[str, tuple[Capability, ...]]] = {}
    #: The names of ``DEGRADATIONS`` (derived).
    DEGRADATION_NAMES: ClassVar[tuple[str, ...]] = ()
    #: The options a user config file may set for this runner, by key.
    CONFIG_KEYS: ClassVar[Mapping[str, ConfigKey]] = {}
    #: What the benchmark compares this runner's cost with.
    SPEED_TARGETS: ClassVar[SpeedTargets] = SpeedTargets()
    #: Set on the instance by the host: the fds its session's policy service
    #: holds for the paths of the policies it resolved (see ``pinned``).
    pin_source: PinSource | None = None
    #: Set on the instance by the host: how many seconds a sandbox that can
    #: outlive this process (a container) is kept idle after ``close`` for the
    #: next process of the same user, workspace and policy; None: removed at
    #: ``close``.  A runner whose sandboxes die with the process ignores it.
    keep_warm_s: float | None = None
    #: Does this runner honour ``keep_warm_s`` (its sandbox can outlive the process)?
    keeps_warm: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for shared in ("prepare", "probe"):
            if shared in cls.__dict__:
                # The preamble and the probe's memory are the same for every runner:
                # one that replaces them could skip the gate.
                raise TypeError(f"{cls.__name__} overrides Runner.{shared}; implement "
                                f"{'wrap' if shared == 'prepare' else 'detect'} instead")
        cls.DEGRADATION_NAMES = tuple(cls.DEGRADATIONS)
        # A misspelt mode must not leave a runner silently refusing (or claiming) the wrong one.
        cls.modes = tuple(SandboxMode.parse(m, field=f"{cls.__name__}.modes") for m in cls.modes)

    @classmethod
    def prune(cls, *, everything: bool = False) -> list[str] | None:
        """Remove what earlier sessions left behind (containers...); the names removed.

        ``None``: this runner leaves nothing behind.  ``everything`` also removes
        what live sessions still use.
        """
        return None

    def baseline(self, policy: SandboxPolicy, cwd: str) -> Baseline | None:
        """The bare equivalent of a run, for ``dsh-sandbox bench``; ``None`` if none."""
        return None

    def protection_costs(self, policy: SandboxPolicy) -> Sequence[ProtectionCost]:
        """What each protection of a run under ``policy`` costs on its own (the
        syscall filter, the cgroup and its keeper, a host probe), for
        ``dsh-sandbox bench``; empty if the runner names none."""
        return ()

    #: The modes this runner enforces completely (every path, network and limit
    #: rule of the policy): what the default ``enforcement`` claims.  Every other
    #: constrained mode is refused.  A runner with partial enforcement (named
    #: degradations) overrides ``enforcement`` instead.
    modes: ClassVar[tuple[SandboxMode | str, ...]] = ()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: dict[str, Any] = dict(options or {})

    def pinned(self, policy: SandboxPolicy) -> PinnedPaths:
        """The policy's paths as the policy service resolved and holds them
        (``dsh.sandbox.pins``): bind, grant and read through these fds, never
        through the names.  A policy no service resolved is pinned now (each
        path must resolve to itself).  Use as a context manager."""
        return policy_pins(policy, self.pin_source)

    # -- what a runner implements ---------------------------------------------------------
    @abc.abstractmethod
    def detect(self) -> RunnerProbe:
        """Is the runner usable here, and if not, why (a reason a person can act on)?

        Asked once per instance: ``probe`` keeps the answer."""

    @abc.abstractmethod
    def wrap(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
             env: Mapping[str, str]) -> Launch:
        """Turn the exact ``argv`` into a launch that enforces ``policy``.

        Called only after the shared preamble (``prepare``): the argv is not empty,
        the runner is available, and the gate accepted its enforcement of
        ``policy``.  Never join the argv into a string; raise ``SandboxUnavailable``
        for anything it cannot enforce after all (fail closed)."""

    def wrap_terminal(self, argv: tuple[str | bytes, ...], policy: SandboxPolicy, *, cwd: str,
                      env: Mapping[str, str], rows: int, cols: int) -> Launch:
        """Like ``wrap``, on a pty of ``rows`` x ``cols`` that the sandbox's own API
        allocates (only for ``terminal_pty == "runner"``): stdin carries the frames
        of ``dsh.sandbox.terminal_frames``, stdout the pty's output, stderr the
        status lines."""
        raise SandboxUnavailable("has no terminal API of its own (terminal sessions run through "
                                 "the terminal relay)", runner=self.name)

    def enforcement(self, policy: SandboxPolicy) -> Enforcement:
        """How completely this runner enforces ``policy`` here.

        Default: full for the modes in ``modes`` (and for danger-full-access),
        refused for the others."""
        if not policy.constrained or policy.mode in self.modes:
            return Enforcement.full()
        raise SandboxUnavailable(f"does not enforce {policy.mode}; it enforces only "
                                 f"{', '.join(map(str, self.modes)) or 'no mode'}", runner=self.name)

    def explain(self, policy: SandboxPolicy) -> RunnerPlan:
        """The rules, network and limits it will apply, and what it cannot."""
        return RunnerPlan(self.name, policy.mode, (f"{self.name} wraps the command (its rules are its own)",),
                          "off" if not policy.network else "on", (), ())

    # -- what the host calls ---------------------------------------------------------------
    def probe(self) -> RunnerProbe:
        """``detect``'s answer, asked once per instance (a probe that raises is asked again)."""
        memo: RunnerProbe | None = self.__dict__.get("_detected")
        if memo is not None:
            return memo
        with _DETECT_LOCK:
            lock = self.__dict__.setdefault("_detect_lock", threading.Lock())
        with lock:
            memo = self.__dict__.get("_detected")
            if memo is None:
                memo = self.__dict__["_detected"] = self.detect()
            return memo

    def prepare(self, argv: Argv, policy: SandboxPolicy, *, cwd: str, env: Mapping[str, str],
                enforcement: Enforcement | None = None, terminal: tuple[int, int] | None = None) -> Launch:
        """Wrap ``argv`` (exactly, never re-joined) for ``policy``: the preamble every
        runner shares, then its ``wrap``.

        The argv must name a program (each item str or bytes); an unavailable
        runner refuses with its probe's reason; the gate refuses a partial
        enforcement with an unaccepted degradation.  Raises ``SandboxUnavailable``
        (``UsageError`` for a bad argv); never runs anything unwrapped.
        ``enforcement``: what the host already asked this runner for ``policy``
        (gated again here, not recomputed).  ``terminal`` (rows, cols): run on a
        pty of the runner's own API (``wrap_terminal``)."""
        exact = exact_argv(argv)
        probe = self.probe()
        if not probe.available:
            raise SandboxUnavailable(probe.reason or "not available here", runner=self.name)
        refusal = network_refusal(self, policy)
        if refusal is not None:
            raise SandboxUnavailable(refusal, runner=self.name)
        check_accepted(self.enforcement(policy) if enforcement is None else enforcement, policy, runner=self.name)
        if terminal is not None:
            return self.wrap_terminal(exact, policy, cwd=cwd, env=env, rows=terminal[0], cols=terminal[1])
        return self.wrap(exact, policy, cwd=cwd, env=env)

    def reporting_gaps(self, policy: SandboxPolicy) -> Mapping[str, str]:
        """What this runner cannot *report* exactly (not enforce): capability -> reason.

        These never gate a run (enforcement does); the conformance suite reports
        the scenarios that cover them as not-enforced with the reason.
        """
        return {}

    def refuses_network_of(self, policy: SandboxPolicy) -> str | None:
        """Why ``policy``'s network cannot be held here (it limits the network
        to named hosts, which this runner cannot do), or ``None``."""
        if policy.constrained and policy.network_allowlist is not None and not self.network_by_name:
            return NOT_BY_NAME
        return None

    def network_mark(self, policy: SandboxPolicy) -> int:
        """Where the refused connections of ``policy``'s allowlist stand now,
        for ``network_refused`` after a command (a runner with ``network_by_name``)."""
        return 0

    def network_refused(self, policy: SandboxPolicy, mark: int) -> tuple[str, ...]:
        """The hosts the allowlist refused since ``mark``, each once, in order.

        Per allowlist, not per command: commands of one session that run at
        the same time under the same allowlist see each other's."""
        return ()

    def limitations(self, policy: SandboxPolicy) -> Mapping[str, str]:
        """Real work this runner cannot let through without opening the host: capability -> reason.

        The opposite of a degradation: nothing is less enforced, something
        legitimate is refused (e.g. local IPC when the IPC objects would be the
        host's).  Never gates a run; ``explain`` says it, and the conformance
        suite reports the workload scenarios that cover it as not-enforced with
        the reason, never as a silent pass or a fail.
        """
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Tear down session resources (containers, remote sandboxes)."""


def network_refusal(runner: Runner, policy: SandboxPolicy) -> str | None:
    """Why ``runner`` cannot hold ``policy``'s network, or ``None``.  Secrets are
    checked here, not in ``refuses_network_of`` (which runners override): a
    runner that does not declare ``network_secrets`` refuses them whatever it overrides."""
    rules = policy.network_allowlist
    if policy.constrained and rules is not None and rules.secrets and not runner.network_secrets:
        return NO_SECRETS
    return runner.refuses_network_of(policy)
