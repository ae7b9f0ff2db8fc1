"""``bash-sandbox`` and ``pwsh-sandbox``: the local executors, wrapped by ``ctx.require(SandboxHost)``.

They are the local executors with four seams overridden:

- ``resolve`` stamps the policy: ``ctx.require(PolicyService).resolve(request.sandbox_mode)``
  (the session's default mode unless an escalation asked for another).  The
  workdir may be anywhere the runner lets the command read; what the command
  may *write* is the policy's business, not the workdir's.
- ``prepare_launch`` hands the exact argv (``bash -c <command>``,
  ``pwsh -NoLogo -NoProfile -NonInteractive -Command <command>``, or a trusted
  caller's ``argv``) to ``ctx.require(SandboxHost).prepare``; never re-joined.  It runs
  inside the execution's deadline, so a runner's setup counts against it.  A
  ``SandboxUnavailable`` from there makes a foreground ``execute()`` raise (the
  command never runs) and settles a background handle as killed with
  ``runner_failed`` facts.  ``danger-full-access`` is not wrapped at all.
- ``base_env``: in constrained modes only a baseline (``ESSENTIAL_ENV``: PATH,
  HOME, locale...) plus the profile's ``env_passthrough`` names is inherited
  from the host (after the credential scrub); a trusted caller's ``env`` and
  the managed ``DSH_*`` facts are layered on top as usual.
- ``sandbox_facts`` / ``failed_facts`` give every result its
  ``SandboxFacts(mode, denied, enforcement, runner, runner_failed, runner_error)``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.executors.denial import Denial, find_denial
from dsh.executors.local import LocalBashExecutor, LocalPwshExecutor
from dsh.executors.process import LocalSubprocessService
from dsh.executors.pty_launch import HostPty
from dsh.executors.seam import (
    CollectedOutput,
    SandboxFacts,
    ShellExecRequest,
    ShellExecSpec,
    ShellExecution,
)
from dsh.executors.shell_env import ShellEnvRegistry
from dsh.sandbox.context import Service
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host import SandboxHost
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_service import PolicyService
from dsh.sandbox.runner import Enforcement, Launch, LocalLaunch, Runner
from dsh.sandbox.sandbox_home import home_env
from dsh.sandbox.trusted_changes import Baseline, Changes

if TYPE_CHECKING:
    from dsh.sandbox.net_rules import NetworkRules
    # The mixin is typed as the local executor it is always combined with.
    _MixinBase = LocalBashExecutor
else:
    _MixinBase = object

#: The baseline of inherited variables a command needs to work at all; a
#: profile's ``env_passthrough`` adds names to it.
ESSENTIAL_ENV: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR",
)

#: ``SandboxFacts.enforcement`` of a run that never started.
NOT_ENFORCED = "none"

Output = CollectedOutput | str | bytes


def _argv_text(arg: str | bytes) -> str:
    return arg if isinstance(arg, str) else arg.decode("utf-8", "replace")


def _text(output: Output | None) -> str:
    if output is None:
        return ""
    if isinstance(output, CollectedOutput):
        return output.text
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output



@functools.lru_cache(maxsize=64)
def _env_filter(passthrough: tuple[str, ...]) -> Callable[[str], object]:
    """One compiled matcher for the baseline names plus a profile's passthrough
    globs (this runs for every variable of every command)."""
    patterns = (*ESSENTIAL_ENV, *passthrough)
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


@dataclass
class _NetworkWindow:
    """A command under an allowlist: its runner, where the refusals stood at its
    start, and whether another command of the session shared its window."""

    runner: Runner
    mark: int
    rules: NetworkRules | None
    shared: bool = False


class SandboxedExecutor(_MixinBase):
    """The overrides shared by both sandboxed executors (a mixin placed before
    the local executor class, so ``super()`` reaches the local behaviour)."""

    requires: ClassVar[tuple[type[Service], ...]] = (
        LocalSubprocessService, ShellEnvRegistry, PolicyService, SandboxHost,
    )

    def __init__(self, ctx: Any, config: Any = None) -> None:
        super().__init__(ctx, config)
        # What actually wrapped each policy, for the facts at settlement.  Keyed
        # by the (hashable, frozen) policy: a session has only a few policies.
        self._chosen: dict[SandboxPolicy, tuple[str, Enforcement]] = {}
        self._chosen_lock = threading.Lock()
        # What each running spec started from, by ``id``: what the run created
        # or changed among the trusted files is judged against it.
        self._started: dict[int, Baseline | None] = {}
        # Under a network allowlist: the runner and its refusal count at the start.
        # Per command under an allowlist: its runner, where the refusals stood
        # at its start, and whether another command shared its window.
        self._network_marks: dict[int, _NetworkWindow] = {}

    # -- services -------------------------------------------------------------------
    @property
    def policy_service(self) -> PolicyService:
        return self.ctx.require(PolicyService)

    @property
    def host(self) -> SandboxHost:
        return self.ctx.require(SandboxHost)

    @property
    def sandbox_mode(self) -> SandboxMode:
        return self.policy_service.default_mode

    def default_workdir(self) -> str:
        """Without a configured ``cwd``, commands start in the policy's workspace."""
        return self.config.cwd or str(self.policy_service.workspace)

    def policy_of(self, spec: ShellExecSpec) -> SandboxPolicy:
        if spec.sandbox_policy is not None:
            return spec.sandbox_policy
        return self.policy_service.resolve(None)

    # -- seam overrides -------------------------------------------------------------
    def execute(self, spec: ShellExecSpec) -> ShellExecution:
        policy = self.policy_of(spec)
        before = self.policy_service.baseline(policy)
        mark = self._network_mark(policy)
        with self._chosen_lock:
            self._started[id(spec)] = before
            if mark is not None:
                window = _NetworkWindow(*mark, policy.network_allowlist)
                for other in self._network_marks.values():
                    if other.runner is window.runner and other.rules == window.rules:
                        other.shared = window.shared = True
                self._network_marks[id(spec)] = window
        try:
            return super().execute(spec)
        except BaseException:
            with self._chosen_lock:
                self._started.pop(id(spec), None)
                self._network_marks.pop(id(spec), None)
            raise

    def _network_mark(self, policy: SandboxPolicy) -> tuple[Runner, int] | None:
        if not policy.constrained or policy.network_allowlist is None:
            return None
        try:
            runner = self.host.choose(policy).runner
        except SandboxUnavailable:
            return None  # the run is refused where that is reported
        return runner, runner.network_mark(policy)

    def resolve(self, request: ShellExecRequest) -> ShellExecSpec:
        spec = super().resolve(request)
        policy = self.policy_service.resolve(request.sandbox_mode)
        return dataclasses.replace(spec, sandbox_policy=policy)

    def base_env(self, spec: ShellExecSpec) -> dict[str, str]:
        env = super().base_env(spec)
        policy = self.policy_of(spec)
        if not policy.constrained:
            return env
        keep = _env_filter(policy.env_passthrough)
        kept = {k: v for k, v in env.items() if keep(k)}
        if policy.home is not None:
            # The real HOME is read from the unfiltered environment: its settings stay readable.
            kept.update(home_env(policy.home, {**kept, "HOME": env.get("HOME", "")}, policy.hidden_paths))
        if policy.private_tmp is not None:
            # Tools put their scratch files where TMPDIR says: in the session's own directory.
            kept["TMPDIR"] = str(policy.private_tmp)
        return kept

    def prepare_launch(
        self, argv: tuple[str | bytes, ...], spec: ShellExecSpec, env: Mapping[str, str]
    ) -> Launch:
        policy = self.policy_of(spec)
        if not policy.constrained:
            return super().prepare_launch(argv, spec, env)
        own_pty = self._runner_pty(spec)
        pair = None
        if spec.terminal is not None and self.host.choose(policy).runner.terminal_pty == "host":
            pair = HostPty()
            env = {**env, **pair.env}
        try:
            launch, runner, enforcement = self.host.prepare(argv, policy, spec.workdir, env, terminal=own_pty)
        except BaseException:
            if pair is not None:
                pair.close()
            raise
        with self._chosen_lock:
            self._chosen[policy] = (runner.name, enforcement)
        if pair is not None:
            if not isinstance(launch, LocalLaunch):  # the choice cannot change between the two calls
                pair.close()
                raise SandboxUnavailable(f"{runner.name}: a host pty needs a local launch", runner=runner.name)
            launch = pair.attach(launch)
        return launch

    def _runner_pty(self, spec: ShellExecSpec) -> tuple[int, int] | None:
        """(rows, cols) when the runner's own PTY API runs this terminal session (no relay)."""
        if spec.terminal is None or not self.policy_of(spec).constrained:
            return None
        try:
            if self.host.choose(self.policy_of(spec)).runner.terminal_pty != "runner":
                return None
        except SandboxUnavailable:
            return None  # prepare_launch meets the same refusal where it is reported
        return spec.terminal.rows, spec.terminal.cols

    def terminal_argv(self, argv: tuple[str | bytes, ...], spec: ShellExecSpec) -> tuple[str | bytes, ...]:
        # The runner's PTY API takes the exact argv; the frames go to it, not to a relay.
        return argv if self._runner_pty(spec) is not None else super().terminal_argv(argv, spec)

    def relay_python(self) -> str:
        # A remote runner's image has its own interpreter; this host's path means nothing there.
        return "python3" if self.host.remote else super().relay_python()

    def require_shell(self, argv: tuple[str | bytes, ...], env: Mapping[str, str]) -> None:
        # A remote runner runs the shell in its own image or machine: whether it
        # is installed there is the runner's to report, not this host's PATH.
        if self.host.remote:
            return
        super().require_shell(argv, env)

    def sandbox_facts(
        self,
        spec: ShellExecSpec,
        exit_code: int | None,
        signal: str | None,
        stdout: Output | None,
        stderr: Output | None,
    ) -> SandboxFacts:
        policy = self.policy_of(spec)
        with self._chosen_lock:
            before = self._started.pop(id(spec), None)
            mark = self._network_marks.pop(id(spec), None)
        if not policy.constrained:
            return SandboxFacts(mode=policy.mode, enforcement="full")
        with self._chosen_lock:
            runner, enforcement = self._chosen.get(policy, (None, None))
        changed = Changes() if before is None else self.policy_service.changed_files(policy, before)
        outputs = (_text(stderr), _text(stdout))
        denial = find_denial(policy, exit_code=exit_code, outputs=outputs, workdir=spec.workdir)
        return SandboxFacts(
            mode=policy.mode,
            denied=denial is not None,
            refusal_note=self._refusal_note(spec, policy, runner, exit_code, outputs, denial),
            enforcement=enforcement.describe() if enforcement else NOT_ENFORCED,
            runner=runner,
            trusted_changed=tuple(map(str, changed.paths)),
            trusted_unsearched=tuple(map(str, changed.unsearched)),
            removed_from_git=tuple(map(str, changed.removed)),
            network_denied=mark.runner.network_refused(policy, mark.mark) if mark is not None else (),
            network_denied_shared=mark is not None and mark.shared,
        )

    def _refusal_note(
        self,
        spec: ShellExecSpec,
        policy: SandboxPolicy,
        runner: str | None,
        exit_code: int | None,
        outputs: tuple[str, str],
        denial: Denial | None,
    ) -> str | None:
        if exit_code is None or exit_code == 0:
            return None  # the common case costs nothing, not even the import
        from dsh.executors.refusal import describe as describe_refusal
        from dsh.executors.refusal import find_refusal, git_key_hint

        if denial is not None and denial.kind == "write":
            return git_key_hint(policy, denial.path) or None
        command = spec.command if spec.argv is None else " ".join(map(_argv_text, spec.argv[:1]))
        refusal = find_refusal(policy, exit_code=exit_code, outputs=outputs, workdir=spec.workdir, command=command)
        if refusal is None:
            return None
        limitations: Mapping[str, str] = {}
        if refusal.kind in ("unix-socket", "socket", "ipc", "file-status") and runner is not None:
            chosen = self.host.runner(runner)
            limitations = chosen.limitations(policy) if chosen is not None else {}
        return describe_refusal(refusal, policy, runner=runner, limitations=limitations)

    def failed_facts(self, spec: ShellExecSpec, error: BaseException) -> SandboxFacts:
        policy = self.policy_of(spec)
        with self._chosen_lock:
            self._started.pop(id(spec), None)
            self._network_marks.pop(id(spec), None)
        runner = error.runner if isinstance(error, SandboxUnavailable) else None
        if runner is None and self.host.runner_name != "auto":
            runner = self.host.runner_name
        return SandboxFacts(
            mode=policy.mode,
            denied=False,
            enforcement=NOT_ENFORCED,
            runner=runner,
            runner_failed=True,
            runner_error=str(error),
        )


class SandboxBashExecutor(SandboxedExecutor, LocalBashExecutor):
    """``bash-sandbox``: ``bash -c <command>`` through ``ctx.require(SandboxHost)``."""


class SandboxPwshExecutor(SandboxedExecutor, LocalPwshExecutor):
    """``pwsh-sandbox``: ``pwsh -NoLogo -NoProfile -NonInteractive -Command <command>``."""
