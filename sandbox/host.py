"""``ctx.require(SandboxHost)``: the runner host the sandboxed executors call.

The host owns one instance of each runner it has loaded (per context, so per
session), picks the runner for a policy, and hands the *exact* argv to it:

- an explicitly configured runner must be available here and allowed by the
  policy, else ``SandboxUnavailable`` with the runner's own probe reason;
- ``auto`` prefers, among available allowed runners, one that enforces the
  policy fully (in the runners' declared ``auto_priority`` order), else a
  partial one whose degradations the policy accepts by name, else
  ``SandboxUnavailable`` naming every runner it looked at and why it was not
  used, with the flags of one runner (pinned with ``--runner``) that would
  run it.  A runner with no ``auto_priority`` (those that cross a machine
  boundary: workspace sync, image) is only considered when the policy's
  ``allowed_runners`` names it.

Runners are the entry points of ``dsh_sandbox.runners`` (``registry``), or the
instances a caller injects (``SandboxHost(ctx, config, runners=[...])``, e.g.
a ``FakeRunner`` in tests), which then are the only ones the host knows.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsh.sandbox.context import Context, Service
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.gate import accept_hint, best_refused, check_accepted, refusal_lines, unaccepted, with_scan_gap
from dsh.sandbox.pins import PinnedPaths
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.registry import (
    AUTO,
    RunnerLoadError,
    auto_order,
    check_runner_name,
    known_runner_names,
    load_runner_class,
    read_priorities,
    runner_entry_points,
    write_priorities,
)
from dsh.sandbox.runner import Argv, Enforcement, Launch, Runner, RunnerProbe, network_refusal

#: The longest a sandbox is kept idle for a later process (a day).
KEEP_WARM_MAX_S = 86400


def _safe_probe(runner: Runner) -> RunnerProbe:
    """``runner.probe()``; a probe that raises means "not available, here is why"."""
    try:
        return runner.probe()
    except SandboxUnavailable as exc:
        return RunnerProbe(runner.name, False, exc.reason)
    except Exception as exc:  # a broken probe must read as unavailable (fail closed)
        return RunnerProbe(runner.name, False, f"probe failed: {type(exc).__name__}: {exc}")


@dataclass(frozen=True)
class SandboxHostConfig:
    """``runner``: ``auto`` or a runner name.  ``options``: per-runner options,
    e.g. ``{"<runner name>": {"image": "dsh-sandbox:local"}}``.
    ``keep_warm_s``: how long a runner keeps an idle sandbox that can outlive
    the process (a container) for the next process of the same workspace and
    policy (``Runner.keep_warm_s``); None: removed when the session closes."""

    runner: str = AUTO
    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    keep_warm_s: float | None = None


@dataclass(frozen=True)
class Selection:
    """The runner chosen for a policy and how completely it enforces it."""

    runner: Runner
    enforcement: Enforcement


class SandboxHost(Service):
    """Service ``ctx.require(SandboxHost)``: selects a runner and wraps exact argvs with it."""

    key: ClassVar[str] = "sandbox"
    Config: ClassVar[type[Any]] = SandboxHostConfig

    def __init__(
        self, ctx: Context, config: SandboxHostConfig | None = None, *, runners: Sequence[Runner] | None = None
    ) -> None:
        super().__init__(ctx, config)
        self.config: SandboxHostConfig
        #: Injected runner instances: then the only runners this host knows.
        self._injected = {r.name: r for r in runners} if runners is not None else None
        keep = self.config.keep_warm_s
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, (int, float))
                                 or not 0 < keep <= KEEP_WARM_MAX_S):
            raise ConfigError(f"sandbox config: keep_warm_s {keep!r}: give seconds above 0 and at most "
                              f"{KEEP_WARM_MAX_S}, or null to remove sandboxes when the session closes")
        for injected in (self._injected or {}).values():
            injected.pin_source = self._pins_of
            injected.keep_warm_s = keep
        try:
            self.runner_name = self._check(self.config.runner)
        except ConfigError as exc:
            raise ConfigError(f"sandbox config: {exc}") from None
        for name in self.config.options:
            if not isinstance(self.config.options[name], Mapping):
                raise ConfigError(f"sandbox config: options[{name!r}] must be a mapping")
            try:
                self._check(name)
            except ConfigError as exc:
                raise ConfigError(f"sandbox config: options: {exc}") from None
        self._runners: dict[str, Runner] = dict(self._injected or {})
        self._load_errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self._closed = False

    # -- runner instances -------------------------------------------------------------
    def names(self) -> list[str]:
        """The runners this host knows, in display order."""
        return list(self._injected) if self._injected is not None else known_runner_names()

    def _check(self, name: str) -> str:
        if self._injected is None:
            return check_runner_name(name)
        if name == AUTO or name in self._injected:
            return name
        raise ConfigError(f"runner: unknown runner {name!r}; use one of: {', '.join([AUTO, *self._injected])}")

    def declared(self, name: str) -> type[Runner] | Runner | None:
        """What declares runner ``name``'s facts (remote, auto_priority); ``None`` if it does not load."""
        if self._injected is not None:
            return self._injected.get(name)
        try:
            return load_runner_class(name)
        except (RunnerLoadError, ConfigError):
            return None

    def _auto_order(self) -> list[str]:
        if self._injected is not None:
            return auto_order(self._injected)
        points = runner_entry_points()
        hinted = read_priorities(points)
        if hinted is None:
            classes = {n: self.declared(n) for n in points}
            hinted = {n: (c.auto_priority if c is not None else None) for n, c in classes.items()}
            if all(c is not None for c in classes.values()):
                # A runner that did not import (a missing extra) is asked again
                # next time, once it may have been installed.
                write_priorities(points, hinted)
        ranked = [(priority, name) for name, priority in hinted.items() if priority is not None]
        return [name for _, name in sorted(ranked)]

    @property
    def remote(self) -> bool:
        """Does the configured runner run commands in its own image or machine?"""
        declared = None if self.runner_name == AUTO else self.declared(self.runner_name)
        return bool(declared is not None and declared.remote)

    def runner(self, name: str) -> Runner | None:
        """This host's instance of runner ``name``; ``None`` if its code does not load.

        Why it did not load is in ``probe(name).reason``.
        """
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("the sandbox host is closed", runner=name)
            if name in self._runners:
                return self._runners[name]
            if name in self._load_errors:
                return None
            try:
                cls = load_runner_class(name)
                instance = cls(self.config.options.get(name, {}))
            except RunnerLoadError as exc:
                self._load_errors[name] = str(exc)
                return None
            instance.pin_source = self._pins_of
            instance.keep_warm_s = self.config.keep_warm_s
            self._runners[name] = instance
            return instance

    def probe(self, name: str) -> RunnerProbe:
        runner = self.runner(name)
        if runner is None:
            return RunnerProbe(name, False, self._load_errors.get(name, "runner not loaded"))
        return _safe_probe(runner)

    def probe_all(self) -> list[RunnerProbe]:
        """A probe for every known runner: those ``auto`` tries first, in its order."""
        order = self._auto_order()
        return [self.probe(name) for name in [*order, *(n for n in self.names() if n not in order)]]

    # -- selection ----------------------------------------------------------------------
    def select(self, policy: SandboxPolicy) -> Runner:
        return self.choose(policy).runner

    def choose(self, policy: SandboxPolicy) -> Selection:
        """Pick the runner for ``policy`` (see the module doc); fail closed."""
        allowed = policy.allowed_runners
        if self.runner_name != AUTO:
            return self._choose_named(self.runner_name, policy)
        order = self._auto_order()
        candidates = order + [n for n in allowed if n not in order]
        if allowed:
            candidates = [n for n in candidates if n in allowed]
        why_not: list[str] = []
        refused: list[tuple[str, tuple[str, ...]]] = []
        partial: Selection | None = None
        for name in candidates:
            try:
                name = self._check(name)
            except ConfigError:
                why_not.append(f"  {name}: not installed")
                continue
            declared = self.declared(name)
            if declared is not None and declared.auto_priority is None and name not in allowed:
                continue  # a stale priority hint: the class has the last word
            probe = self.probe(name)
            runner = self.runner(name)
            if not probe.available or runner is None:
                why_not.append(f"  {name}: not available: {probe.reason or 'no reason given'}")
                continue
            refusal = network_refusal(runner, policy)
            if refusal is not None:
                why_not.append(f"  {name}: {refusal.split('; nothing ran')[0]}")
                continue
            enforcement = self._enforcement(runner, policy)
            if enforcement.level == "full":
                return Selection(runner, enforcement)
            if enforcement.accepted_by(policy):
                partial = partial or Selection(runner, enforcement)
                continue
            why_not.append(f"  {name}: enforces {policy.mode} only partially:")
            why_not += refusal_lines(enforcement, policy, indent="    ")
            refused.append((name, unaccepted(enforcement, policy)))
        if partial is not None:
            return partial
        if not candidates:
            why_not.append(f"  the profile allows only {', '.join(allowed)}")
        lines = [f"no runner can enforce {policy.mode} here; nothing ran:", *why_not]
        # One runner's flags, with that runner pinned: the union of every
        # runner's would let auto pick the first accepted one, maybe the weakest.
        best = best_refused(refused)
        if best is not None:
            lines.append(accept_hint(best[1], runner=best[0]))
        every = tuple(dict.fromkeys(d for _, names in refused for d in names))
        raise SandboxUnavailable("\n".join(lines), degradations=every)

    def _choose_named(self, name: str, policy: SandboxPolicy) -> Selection:
        if policy.allowed_runners and name not in policy.allowed_runners:
            raise SandboxUnavailable(
                f"the profile {policy.profile or '(inline)'!s} allows only "
                f"{', '.join(policy.allowed_runners)}; configure one of those runners",
                runner=name,
            )
        probe = self.probe(name)
        runner = self.runner(name)
        if not probe.available or runner is None:
            raise SandboxUnavailable(probe.reason or "not available here", runner=name)
        refusal = network_refusal(runner, policy)
        if refusal is not None:
            raise SandboxUnavailable(refusal, runner=name)
        enforcement = self._enforcement(runner, policy)
        check_accepted(enforcement, policy, runner=name)
        return Selection(runner, enforcement)

    @staticmethod
    def _enforcement(runner: Runner, policy: SandboxPolicy) -> Enforcement:
        try:
            enforcement = runner.enforcement(policy)
        except SandboxUnavailable:
            raise
        except OSError as exc:  # a policy path changed under the planner (a concurrent rename)
            where = exc.filename or "a policy path"
            raise SandboxUnavailable(
                f"{where} changed while the sandbox was being planned ({exc.strerror or exc}); nothing ran, retry",
                runner=runner.name,
            ) from exc
        except Exception as exc:  # cannot tell what it enforces: refuse
            raise SandboxUnavailable(
                f"cannot report its enforcement: {type(exc).__name__}: {exc}", runner=runner.name
            ) from exc
        return with_scan_gap(enforcement, policy)

    # -- wrapping -----------------------------------------------------------------------
    def prepare(
        self,
        argv: Argv,
        policy: SandboxPolicy,
        cwd: str,
        env: Mapping[str, str],
        terminal: tuple[int, int] | None = None,
    ) -> tuple[Launch, Runner, Enforcement]:
        """Wrap the exact ``argv`` for ``policy`` with the chosen runner.

        Raises ``SandboxUnavailable`` (never falls back to an unwrapped launch).
        ``terminal`` (rows, cols): on the runner's own pty API (see ``Runner.wrap_terminal``).
        """
        exact: Sequence[str | bytes] = tuple(argv)
        if not policy.constrained and self.runner_name == AUTO:
            # Nothing to enforce and no runner named: the sandboxed executors run
            # danger-full-access unwrapped and never get here.  A named runner
            # (e.g. e2b, whose danger-full-access means root in the remote
            # sandbox) still receives the policy.
            raise SandboxUnavailable(
                f"{policy.mode} needs no runner under runner=auto; run it unwrapped"
            )
        selection = self.choose(policy)
        try:
            launch = selection.runner.prepare(exact, policy, cwd=cwd, env=env, enforcement=selection.enforcement,
                                              terminal=terminal)
        except OSError as exc:
            # A path that changed while the runner read it (a race with another
            # run): nothing ran, and the person gets the path, not a traceback.
            where = f" ({exc.filename})" if exc.filename else ""
            raise SandboxUnavailable(
                f"the filesystem changed while the sandbox was prepared{where}: {exc.strerror or exc}; "
                "nothing ran, retry",
                runner=selection.runner.name,
            ) from None
        return launch, selection.runner, selection.enforcement

    def _pins_of(self, policy: SandboxPolicy) -> PinnedPaths | None:
        """The fds the session's policy service holds for ``policy``'s paths."""
        from dsh.sandbox.policy_service import PolicyService

        service = self.ctx.get(PolicyService)
        return None if service is None else service.pins(policy)

    # -- teardown -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runners = list(self._runners.values())
        errors: list[BaseException] = []
        for runner in runners:
            try:
                runner.close()
            except BaseException as exc:  # close the others anyway
                errors.append(exc)
        if errors:
            raise errors[0]
