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
import errno
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
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.pins import PinnedPaths, PinSource, policy_pins
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.stdin_feed import StdinFeed

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
class ExitStatus:
    exit_code: int | None
    signal: int | None = None


#: Exit statuses of a command that could not be started, as a shell, ``env``
#: and ``docker run`` report them: found but not executable (a directory, no
#: execute permission, not a format the kernel runs), and not found.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


def exec_failure_status(err: int) -> int:
    """The shell's exit status for an ``execve`` that failed with ``err``."""
    return EXIT_NOT_FOUND if err == errno.ENOENT else EXIT_NOT_EXECUTABLE


#: POSIX sh (dash) run just before ``exec "$@"`` by runners that start the
#: command through a shell inside the sandbox: a program that cannot be
#: executed gets the one message and status the local executor gives
#: (``dsh-sandbox: x: command not found``, 127; 126 for a directory or a file
#: without execute permission), not the shell's or bwrap's own wording.  The
#: lookup is the sandbox's own (its PATH, its filesystem); builtins only.
EXEC_CHECK_SH = (
    "case $1 in "
    "*/*) if [ ! -e \"$1\" ]; then "
    "printf 'dsh-sandbox: %s: No such file or directory\\n' \"$1\" >&2; exit 127; "
    "elif [ -d \"$1\" ] || [ ! -x \"$1\" ]; then "
    "printf 'dsh-sandbox: %s: Permission denied\\n' \"$1\" >&2; exit 126; fi;; "
    "*) _dsh_found=; _dsh_ifs=$IFS; IFS=:; set -f; "
    "for _dsh_d in ${PATH-}; do if [ -f \"${_dsh_d:-.}/$1\" ] && [ -x \"${_dsh_d:-.}/$1\" ]; then "
    "_dsh_found=1; break; fi; done; IFS=$_dsh_ifs; set +f; "
    "if [ -z \"$_dsh_found\" ]; then printf 'dsh-sandbox: %s: command not found\\n' \"$1\" >&2; exit 127; fi;; "
    "esac; "
)


@dataclass(frozen=True)
class LocalLaunch:
    """A local argv to spawn, plus what the spawn needs from the runner.

    - ``spawn_in``: runs the spawn callable inside the runner's restricted
      context (for Landlock: a thread that has applied the ruleset, no_new_privs
      and seccomp).  ``None`` means spawn normally.
    - ``env``: variables the runner adds (after the executor's env layering).
    - ``spawn_env``: when set, the whole environment ``argv[0]`` starts with
      instead of the command's: ``argv`` begins with host-side helpers, which
      must not see the command's variables (``dsh.sandbox.helper_env``), and
      the runner hands the command its own environment (``env`` of
      ``prepare``, plus ``env`` above) through the last hop.
    - ``kill_tree``: kills everything the command started (e.g. a cgroup);
      ``None`` means the subprocess service kills the process group and tree.
    - ``cleanup``: called once the process is reaped.
    - ``exit_status``: the command's status from the wrapper's, given a
      reader of the retained stderr (bwrap exits 1 when it cannot ``execve`` the command: that
      becomes 126/127 as a shell reports it, a failure of the runner itself
      becomes ``ExitStatus(None)``: not started).  ``None``: taken as it is.
    """

    argv: tuple[str | bytes, ...]
    spawn_in: Callable[[Callable[[], Any]], Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    spawn_env: Mapping[str, str] | None = None
    pass_fds: tuple[int, ...] = ()
    kill_tree: Callable[[int, int], None] | None = None  # (pid, signal)
    cleanup: Callable[[], None] | None = None
    exit_status: Callable[[ExitStatus, Callable[[], bytes]], ExitStatus] | None = None


class RemoteProcess(abc.ABC):
    """A process running somewhere else (container, remote sandbox).

    ``stdout_fd`` / ``stderr_fd`` are read ends of OS pipes the runner writes
    into and closes at EOF; the subprocess service reads and closes them.
    """

    stdout_fd: int
    stderr_fd: int

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        """Block until exit (or ``timeout`` seconds); ``None`` if still running."""

    @abc.abstractmethod
    def kill(self, sig: int) -> None:
        """Send ``sig`` to the whole process tree of this command in the sandbox."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources once the process is done."""


@dataclass(frozen=True)
class RemoteLaunch:
    """A launch whose ``start`` creates a ``RemoteProcess``.

    ``stdin`` is bytes written once, or a ``StdinFeed`` to stream (a feeder
    thread takes its chunks and closes the command's stdin at its EOF).
    ``start(stdin, deadline)`` may block for preparation (syncing a workspace);
    ``deadline`` is a ``time.monotonic()`` value or ``None``, and preparation
    time counts against it.
    """

    start: Callable[[bytes | StdinFeed | None, float | None], RemoteProcess]
    cleanup: Callable[[], None] | None = None


Launch = LocalLaunch | RemoteLaunch


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
    #: Where a terminal session's pty is allocated: ``sandbox`` (the sandbox has
    #: a ``/dev/ptmx`` of its own, so TIOCSTI and job control stay inside) or
    #: ``host`` (it cannot open one: the host opens the session's own pair and
    #: passes it in; never the caller's terminal).
    terminal_pty: ClassVar[Literal["sandbox", "host"]] = "sandbox"
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
                enforcement: Enforcement | None = None) -> Launch:
        """Wrap ``argv`` (exactly, never re-joined) for ``policy``: the preamble every
        runner shares, then its ``wrap``.

        The argv must name a program (each item str or bytes); an unavailable
        runner refuses with its probe's reason; the gate refuses a partial
        enforcement with an unaccepted degradation.  Raises ``SandboxUnavailable``
        (``UsageError`` for a bad argv); never runs anything unwrapped.
        ``enforcement``: what the host already asked this runner for ``policy``
        (gated again here, not recomputed)."""
        exact = exact_argv(argv)
        probe = self.probe()
        if not probe.available:
            raise SandboxUnavailable(probe.reason or "not available here", runner=self.name)
        check_accepted(self.enforcement(policy) if enforcement is None else enforcement, policy, runner=self.name)
        return self.wrap(exact, policy, cwd=cwd, env=env)

    def reporting_gaps(self, policy: SandboxPolicy) -> Mapping[str, str]:
        """What this runner cannot *report* exactly (not enforce): capability -> reason.

        These never gate a run (enforcement does); the conformance suite reports
        the scenarios that cover them as not-enforced with the reason.
        """
        return {}

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
