"""Runs the catalog per runner and mode through the real sandboxed executor.

For each runner x mode: a private base directory (outside every default
writable root, so "outside" really is outside), a conformance profile with
limits and a hidden path, one context (``sandbox-policy`` + ``sandbox`` +
``bash-sandbox``), then every scenario: setup, run, host-side check.  Scenarios
that cover a capability the runner declares partial are reported
"not-enforced" with the runner's own reason, and not run.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.cli.conformance.catalog import SCENARIOS
from dsh.cli.conformance.catalog_network import ALLOWED
from dsh.cli.conformance.listeners import Listeners
from dsh.cli.conformance.model import (
    GO_LINE,
    GO_MARKER,
    READY_MARKER,
    HostEnv,
    RunOutput,
    Scenario,
    ScenarioResult,
    Unavailable,
)
from dsh.sandbox import capability as cap
from dsh.sandbox.errors import DshError, SandboxUnavailable
from dsh.sandbox.runner import Enforcement, Runner

if TYPE_CHECKING:
    from dsh.sandbox.context import Context

PROFILE = """\
description = "dsh-sandbox conformance profile"
mode = "{mode}"
network = false
# As the built-in workspace-write profile: commits allowed, hooks and config read-only.
git = "commit"
hidden_paths = ["{root}/hidden", "{root}/.dshconf-hp", "{root}/ovl/ro/hid", "{root}/ovl/hid",
                "{root}/.dshconf-p/hid"]
# Overlapping rules, nested both ways: the strictest rule wins (hidden over
# protected and read-only, those over writable).
read_only_paths = ["{root}/ovl/ro", "{root}/ovl/hid/ro"]
protected_names = [".dshconf-hp", ".dshconf-p"]
# One sandbox HOME per cell, inside its private base: every scenario's own
# per-workspace home would pile up in the tester's ~/.cache.
home = "{home}"
[limits]
# Without a cgroup, the process limit is RLIMIT_NPROC, which counts every
# process and thread of the user (the harness's own included): leave room.
max_processes = 512
max_memory = "512MiB"
max_file_size = "16MiB"
"""

# Secrets behind overlapping rules (see PROFILE); every one of them must stay unreadable.
# The allowlist scenarios' profile: the cell's, with the network limited to one host.
ALLOWLIST_PROFILE = """extends = "{parent}"
[network]
mode = "allowlist"
allow = ["{allowed}"]
allow_private_for = ["{allowed}"]
"""

OVERLAP_SECRETS = (".dshconf-hp", "ovl/ro/hid/secret.txt", "ovl/hid/ro/secret.txt",
                   ".dshconf-p/hid/secret.txt", "ovl/hid/.dshconf-p/secret.txt")

SECRET_NAMES = ("DSHCONF_API_KEY", "DSHCONF_SECRET", "DSHCONF_TOKEN", "DSHCONF_PASSWORD")


@dataclass
class Cell:
    runner: str
    mode: str
    results: list[ScenarioResult] = field(default_factory=list)
    note: str = ""  # e.g. why the whole cell is unavailable

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)


def partial_capabilities(declared: type[Runner] | Runner | None, enforcement: Enforcement) -> dict[str, str]:
    """Capability name -> the runner's own reasons, for each capability a
    degradation of ``enforcement`` weakens (as the runner declares it)."""
    from dsh.sandbox.gate import HOST_DEGRADATIONS, summarize

    covers = {**HOST_DEGRADATIONS, **(declared.DEGRADATIONS if declared is not None else {})}
    reasons: dict[str, list[str]] = {}
    for degradation in enforcement.degradations:
        why = "; ".join(summarize(enforcement.reasons_for(degradation))) or degradation
        for capability in covers.get(degradation, ()):
            reasons.setdefault(capability.name, []).append(why)
    return {name: "; ".join(dict.fromkeys(whys)) for name, whys in reasons.items()}


class Harness:
    def __init__(
        self,
        *,
        runner_options: Mapping[str, Mapping[str, Any]] | None = None,
        progress: Callable[[ScenarioResult], None] | None = None,
        base_dir: str | None = None,
    ) -> None:
        self.runner_options = {k: dict(v) for k, v in (runner_options or {}).items()}
        self.progress = progress or (lambda r: None)
        # /var/tmp: outside /tmp and $TMPDIR, which workspace-write makes writable.
        self.base_dir = base_dir or ("/var/tmp" if os.path.isdir("/var/tmp") else None)
        self.secrets = self._plant_secrets()

    @staticmethod
    def _plant_secrets() -> dict[str, str]:
        found = {k: v for k, v in os.environ.items() if k.startswith("DSHCONF_") and v}
        if found:
            return found
        planted = {name: f"dshconf-{secrets.token_hex(8)}" for name in SECRET_NAMES}
        os.environ.update(planted)  # inherited by the executor's children unless scrubbed
        return planted

    def run(self, runners: Iterable[str], modes: Iterable[str], scenarios: Iterable[Scenario] = SCENARIOS
            ) -> list[Cell]:
        chosen = list(scenarios)
        return [self.run_cell(r, m, chosen) for r in runners for m in modes]

    # -- one runner x mode --------------------------------------------------------
    def run_cell(self, runner: str, mode: str, scenarios: list[Scenario]) -> Cell:
        cell = Cell(runner, mode)
        base = Path(tempfile.mkdtemp(prefix=f"dsh-conformance-{runner}-", dir=self.base_dir)).resolve()
        base.chmod(0o755)
        root, outside = base / "workspace", base / "outside"
        root.mkdir()
        outside.mkdir()
        (root / "hidden").mkdir()
        (base / "home").mkdir(mode=0o700)
        (root / "hidden" / "secret.txt").write_text("TOPSECRET\n")
        for rel in OVERLAP_SECRETS:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("TOPSECRET\n")
        profile = base / "conformance.toml"
        profile.write_text(PROFILE.format(mode=mode, root=root, home=base / "home"))
        listeners = Listeners(outside, secrets.token_hex(6))
        victim = subprocess.Popen(["sleep", "3600"], env={**os.environ, **self.secrets},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        ctx = None
        allowlisted: list[Context] = []  # the session of the allowlist scenarios, once one runs
        allowlisted_tools: dict[str, bool] = {}  # what that session found installed
        try:
            ctx, enforcement, reporting, limited = self._context(runner, mode, root, profile)
            from dsh.sandbox.host import SandboxHost

            declared = ctx.require(SandboxHost).declared(runner)
            separate_kernel = bool(getattr(declared, "separate_kernel", False))
            reasons = partial_capabilities(declared, enforcement)
            tools: dict[str, bool] = {}
            for scenario in scenarios:
                nonce = secrets.token_hex(6)
                env = HostEnv(base=base, root=root, ws=root / scenario.id, outside=outside, nonce=nonce,
                              ports=listeners.ports, abstract=listeners.abstract, unix_path=listeners.unix_path,
                              victim_pid=victim.pid, secrets=self.secrets, hits=listeners.hits,
                              suid_helper=os.environ.get("DSH_CONFORMANCE_SUID"), is_root=os.geteuid() == 0,
                              supervisor_pid=os.getpid(), listeners=listeners, runner=runner,
                              runner_options=self.runner_options, accepted=enforcement.degradations)
                gap = next((why for cap, why in reporting.items() if cap in scenario.covers), None)
                # A limitation is work the runner refuses: it excuses a scenario that
                # expects the work to run, never an attack that expects a refusal.
                wants_work = scenario.expect.get(mode) == "ok"
                limit = next((why for cap, why in limited.items() if cap in scenario.covers and wants_work), None)
                if gap is not None:
                    result = ScenarioResult(scenario.id, runner, mode, "not-enforced", f"runner cannot report: {gap}")
                elif limit is not None:
                    result = ScenarioResult(scenario.id, runner, mode, "not-enforced",
                                            f"runner declares a limitation: {limit}")
                elif scenario.allowlist:
                    # The allowlist session also accepts what only an allowlist
                    # degrades (Landlock names a port, never an address).
                    by_name = tuple(name for name, caps in (declared.DEGRADATIONS if declared else {}).items()
                                    if cap.NETWORK_BY_NAME in caps)
                    result = self._allowlisted(allowlisted, allowlisted_tools, (*enforcement.degradations, *by_name),
                                               runner, mode, profile, root, scenario, env, reasons, listeners,
                                               separate_kernel)
                else:
                    result = self._scenario(ctx, runner, mode, scenario, env, reasons, tools, listeners,
                                            separate_kernel)
                cell.results.append(result)
                self.progress(result)
        except SandboxUnavailable as exc:
            cell.note = exc.reason
            done = {r.scenario for r in cell.results}
            for scenario in scenarios:
                if scenario.id not in done:
                    result = ScenarioResult(scenario.id, runner, mode, "unavailable", exc.reason)
                    cell.results.append(result)
                    self.progress(result)
        finally:
            for opened in (*allowlisted, *([ctx] if ctx is not None else [])):
                opened.close()
            victim.kill()
            victim.wait()
            listeners.close()
            shutil.rmtree(base, ignore_errors=True)
        return cell

    def _allowlisted(self, opened: list[Context], tools: dict[str, bool], accept: tuple[str, ...], runner: str,
                     mode: str, profile: Path, root: Path, scenario: Scenario, env: HostEnv,
                     reasons: Mapping[str, str], listeners: Listeners, separate_kernel: bool) -> ScenarioResult:
        """``scenario`` in the cell's allowlist session (made on first use); a
        runner that refuses the allowlist makes this scenario unavailable, not the cell."""
        try:
            if not opened:
                allowlist = profile.with_name("conformance-allowlist.toml")
                allowlist.write_text(ALLOWLIST_PROFILE.format(parent=profile.name, allowed=ALLOWED))
                opened.append(self._session(runner, mode, root, allowlist, accept))
            return self._scenario(opened[0], runner, mode, scenario, env, reasons, tools, listeners, separate_kernel)
        except SandboxUnavailable as exc:
            return ScenarioResult(scenario.id, runner, mode, "unavailable", exc.reason)

    def _session(self, runner: str, mode: str, root: Path, profile: Path, accept: Iterable[str]) -> Context:
        from dsh.sandbox.session import SessionSpec, build_session

        return build_session(SessionSpec(
            mode=mode, profile=str(profile), workspace=str(root), accept_degraded=tuple(accept),
            runner=runner, runner_options=self.runner_options,
            executor="bash-sandbox", executor_config={"cwd": str(root), "grace_ms": 500},
        ))

    def _context(self, runner: str, mode: str, root: Path, profile: Path
                 ) -> tuple[Context, Any, dict[str, str], dict[str, str]]:
        from dsh.sandbox.host import SandboxHost
        from dsh.sandbox.policy_service import PolicyService

        def session(accept: Iterable[str]) -> Context:
            return self._session(runner, mode, root, profile, accept)

        probe_ctx = session(())
        try:
            policy = probe_ctx.require(PolicyService).resolve()
            host = probe_ctx.require(SandboxHost)
            instance = host.runner(runner)
            probe = host.probe(runner)
            if instance is None or not probe.available:
                raise SandboxUnavailable(probe.reason or "runner not available", runner=runner)
            enforcement = instance.enforcement(policy)
            reporting = dict(instance.reporting_gaps(policy))
            limited = dict(instance.limitations(policy))
        finally:
            probe_ctx.close()
        # Accept what the runner declares partial so the rest of the catalog runs;
        # the scenarios that cover it are reported not-enforced.
        return session(enforcement.degradations), enforcement, reporting, limited

    def _scenario(self, ctx: Any, runner: str, mode: str, scenario: Scenario, env: HostEnv,
                  reasons: Mapping[str, str], tools: dict[str, bool], listeners: Listeners,
                  separate_kernel: bool = False) -> ScenarioResult:
        def result(outcome: str, detail: str = "", elapsed: float = 0.0) -> ScenarioResult:
            return ScenarioResult(scenario.id, runner, mode, outcome, detail, elapsed)  # type: ignore[arg-type]

        covered = set(reasons).intersection(scenario.covers)
        if covered:
            why = "; ".join(f"{cap}: {reasons[cap]}" for cap in sorted(covered))
            return result("not-enforced", f"runner declares partial {why}")
        if scenario.judged_inside and separate_kernel:
            return result("unavailable", "judged inside the sandbox, whose kernel is not this host's")
        if scenario.id == "proc-setuid" and not (env.suid_helper and not env.is_root):
            return result("unavailable", "needs a non-root run and a root-owned setuid helper "
                                         "(DSH_CONFORMANCE_SUID)")
        env.ws.mkdir(parents=True, exist_ok=True)
        for tool in scenario.requires:
            if tool not in tools:
                # The marker tells "not installed" from a probe that itself failed.
                probe = self._execute(ctx, ("sh", "-c", f"command -v {tool} || echo dsh-missing"), env, 20_000, {})
                if probe.exit_code != 0:
                    return result("fail", f"probing for {tool} failed: exit={probe.exit_code} "
                                          f"stderr={probe.stderr[-300:].decode('utf-8', 'replace')!r}")
                tools[tool] = b"dsh-missing" not in probe.stdout
            if not tools[tool]:
                return result("unavailable", f"{tool} is not available inside the sandbox")
        try:
            if scenario.setup:
                scenario.setup(env)
            listeners.reset()
            argv = tuple(env.fmt(a) if isinstance(a, str) else a for a in scenario.argv)
            try:
                out = self._execute(ctx, argv, env, scenario.timeout_ms, scenario.env, scenario.during,
                                    tty=scenario.tty)
            except SandboxUnavailable:
                raise
            except DshError as exc:
                return result("fail", f"{exc.code}: {exc}")
            if scenario.during and not out.went:
                # Any working sandbox lets the command print: no marker means it never
                # ran, and a verdict on the host object would be about nothing.
                tail = out.stderr[-300:].decode("utf-8", "replace")
                return result("fail", f"the command never printed the ready marker (exit={out.exit_code}, "
                                      f"signal={out.signal}); stderr: {tail!r}", out.elapsed_s)
            if scenario.during and GO_MARKER not in out.stdout:
                tail = out.stderr[-300:].decode("utf-8", "replace")
                return result("fail", f"the command never read the host's go on its stdin (exit={out.exit_code}, "
                                      f"signal={out.signal}): the runner does not pass stdin on; stderr: "
                                      f"{tail!r}", out.elapsed_s)
            expect = scenario.expect[mode]
            check = scenario.check_ok if expect == "ok" else scenario.check_blocked
            problem = check(env, out) if check else None
        except Unavailable as exc:
            return result("unavailable", str(exc))
        finally:
            for cleanup in reversed(env.cleanups):
                with contextlib.suppress(Exception):
                    cleanup()
        if problem and out.stderr and "stderr" not in problem:
            problem += f" [stderr: {out.stderr[-300:].decode('utf-8', 'replace')!r}]"
        return result("fail" if problem else "pass", problem or "", out.elapsed_s)

    @staticmethod
    def _execute(ctx: Any, argv: tuple[str | bytes, ...], env: HostEnv, timeout_ms: int,
                 caller_env: Mapping[str, str], during: Callable[[HostEnv], None] | None = None,
                 *, tty: bool = False) -> RunOutput:
        from dsh.executors.seam import ShellExecRequest, ShellExecutor, TerminalSize
        from dsh.sandbox.stdin_feed import StdinFeed

        label = " ".join(a if isinstance(a, str) else a.decode("utf-8", "replace") for a in argv)
        terminal: dict[str, Any] = {}
        go = StdinFeed() if during is not None else None
        if tty:
            # Left open: the relay takes the end of its input for a hang-up.
            terminal = {"terminal": TerminalSize(), "stdin": StdinFeed()}
        elif go is not None:
            terminal = {"stdin": go}
        request = ShellExecRequest(command=label, argv=argv, workdir=str(env.ws), timeout_ms=timeout_ms,
                                   env=dict(caller_env) or None, **terminal)
        start = time.monotonic()
        shell = ctx.require(ShellExecutor)
        execution = shell.execute(shell.resolve(request))
        went = False
        if during is not None and go is not None:
            try:
                if _await_ready(execution, start + timeout_ms / 1000):
                    during(env)
                    went = True
                    go.write(GO_LINE, timeout=10)
            finally:
                go.close()
        res = execution.result()
        elapsed = time.monotonic() - start
        stdout = _read_all(execution, "stdout")
        stderr = _read_all(execution, "stderr")
        return RunOutput(
            exit_code=res.exit_code, signal=res.signal, timed_out=res.timed_out, stdout=stdout, stderr=stderr,
            stdout_text=res.stdout.text, stdout_total=res.stdout.total_bytes,
            stdout_omitted=res.stdout.omitted_bytes, spill_path=res.stdout.spill_path,
            denied=bool(res.sandbox and res.sandbox.denied), elapsed_s=elapsed,
            trusted_changed=res.sandbox.trusted_changed if res.sandbox else (), went=went,
        )


def _await_ready(execution: Any, deadline: float) -> bool:
    """Wait until the command prints READY_MARKER; False if it ends or the deadline passes first."""
    seen = b""
    offset = 0
    while time.monotonic() < deadline:
        data, offset = execution.observed.read("stdout", offset)
        seen = (seen + data)[-4096:]
        if READY_MARKER in seen:
            return True
        if not data and execution.wait(0.02):
            return False
    return False


def _read_all(execution: Any, stream: str) -> bytes:
    chunks, offset = [], 0
    with contextlib.suppress(Exception):
        while True:
            data, offset = execution.observed.read(stream, offset)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)
