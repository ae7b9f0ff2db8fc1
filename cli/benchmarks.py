"""Benchmarks: what each runner costs, measured against a bare spawn in the same run.

Speed is measured, not asserted: this reports medians, p95 and ratios against
the project's speed targets; nothing here fails on timing.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.sandbox.errors import DshError

if TYPE_CHECKING:
    from dsh.sandbox.context import Context

#: A ratio target: (row name, baseline row name, target ratio, "<=" or ">=").
Target = tuple[str, str, float, str]


@dataclass(frozen=True)
class Timing:
    name: str
    samples: int
    median_ms: float
    p95_ms: float
    note: str = ""


@dataclass
class Report:
    timings: list[Timing] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def timing(self, name: str) -> Timing | None:
        return next((t for t in self.timings if t.name == name), None)


#: A measure beyond the built-in ones: it adds to the report, given the bench workspace.
Section = Callable[[Report, Path], None]


def summary(name: str, samples_ms: Sequence[float], note: str = "") -> Timing:
    """The median and p95 of ``samples_ms``."""
    values = sorted(samples_ms)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return Timing(name, len(values), statistics.median(values), p95, note)


def _measure(name: str, fn: Callable[[], object], n: int, warmup: int = 3) -> Timing:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return summary(name, samples)


def _context(runner: str | None, workspace: Path) -> Context:
    from dsh.sandbox.registry import load_runner_class
    from dsh.sandbox.session import SessionSpec, build_session

    if runner is None:
        return build_session(SessionSpec(sandboxed=False, executor="bash-local",
                                        executor_config={"cwd": str(workspace)}))
    # The cost of the sandbox is measured, not its completeness: accept whatever
    # this machine cannot enforce.
    accept = tuple(load_runner_class(runner).DEGRADATION_NAMES)
    return build_session(SessionSpec(
        mode="workspace-write", workspace=str(workspace), accept_degraded=accept,
        runner=runner, executor="bash-sandbox", executor_config={"cwd": str(workspace)},
    ))


def sessions(report: Report, runners: Iterable[str | None], workspace: Path,
             skip_key: str) -> Iterator[tuple[str | None, Context]]:
    """A session on each runner in turn (``None``: bash-local), closed when the
    caller moves on; one that cannot be built is reported under
    ``skip_key.format(label)``, not raised."""
    for runner in runners:
        try:
            ctx = _context(runner, workspace)
        except Exception as exc:
            report.skipped[skip_key.format(runner or "bash-local")] = str(exc)
            continue
        try:
            yield runner, ctx
        finally:
            ctx.close()


def _runner_true(ctx: Context) -> Callable[[], object]:
    from dsh.executors.seam import ShellExecRequest, ShellExecutor

    shell = ctx.require(ShellExecutor)
    spec = shell.resolve(ShellExecRequest(command="true", argv=("true",)))

    def run() -> object:
        result = shell.execute(spec).result()
        if result.exit_code != 0:
            raise RuntimeError(f"`true` failed: {result.stderr.text[-200:]}")
        return result

    return run


def bench_runners(report: Report, runners: Sequence[str], n: int, workspace: Path) -> None:
    from dsh.sandbox.registry import load_runner_class

    with _context(None, workspace) as ctx:
        report.timings.append(_measure("bash-local true", _runner_true(ctx), n))
    for runner in runners:
        try:
            ctx = _context(runner, workspace)
        except Exception as exc:  # an unavailable runner is reported, not fatal
            report.skipped[runner] = str(exc)
            continue
        try:
            report.timings.append(_measure(f"{runner} true", _runner_true(ctx), n))
            local = load_runner_class(runner).SPEED_TARGETS.vs_local
            if local is not None:
                report.targets.append((f"{runner} true", "bash-local true", local, "<="))
            bench_baseline(report, ctx, runner, n, workspace)
        except Exception as exc:
            report.skipped[runner] = f"{type(exc).__name__}: {exc}"
        finally:
            ctx.close()


def bench_baseline(report: Report, ctx: Context, runner: str, n: int, workspace: Path) -> None:
    """The runner's own bare equivalent (bare bwrap, ``docker run --rm``), if it has one."""
    from dsh.sandbox.host import SandboxHost
    from dsh.sandbox.policy_service import PolicyService

    instance = ctx.require(SandboxHost).runner(runner)
    if instance is None:
        raise RuntimeError(f"runner {runner} did not load")
    baseline = instance.baseline(ctx.require(PolicyService).resolve(), str(workspace))
    if baseline is None:
        return
    samples, warmup = (max(5, n // 5), 1) if baseline.slow else (n, 3)
    try:
        report.timings.append(_measure(baseline.label, baseline.run, samples, warmup))
    finally:
        if baseline.close is not None:
            baseline.close()
    measure = f"{runner} true"
    if baseline.slow:
        # Measured right after the slow baseline, under the same conditions.
        measure = f"{runner} warm exec true"
        report.timings.append(_measure(measure, _runner_true(ctx), samples, warmup))
    target = type(instance).SPEED_TARGETS.vs_baseline
    if target is not None:
        report.targets.append((measure, baseline.label, target, "<="))


#: Peers timed by ``--vs``: the name on PATH and the argv that runs ``true`` in
#: their sandbox as close as they come to dsh-sandbox's default (workspace-write,
#: network off).
PEERS: dict[str, tuple[str, ...]] = {
    "codex": ("sandbox", "--", "true"),
    "srt": ("true",),
    "landrun": ("--rox", "/", "--rw", "{workspace}", "true"),
    "firejail": ("--quiet", "--noprofile", "--net=none", "true"),
}
#: How far the CLI's start may exceed ``python -c pass``: ``--version`` and ``--help``
#: by half, a sandboxed ``true`` by two and a half times (and each peer twice as slow).
CLI_START_TARGET = 1.5
CLI_RUN_TARGET = 2.5
PEER_TARGET = 0.5
#: A warm call (the container kept from the last run) against a first call (one made and removed).
KEPT_TARGET = 0.5
#: How long the bench's warm calls keep their container: past the bench, not the default ten minutes.
_BENCH_KEEP_S = "60"


def _run_label(runner: str) -> str:
    return f"dsh-sandbox run --runner {runner} -- true"


def degradation_flags(runner: str) -> list[str]:
    """``--accept-degraded`` for every gap ``runner`` declares: the cost is
    measured, not completeness."""
    from dsh.sandbox.registry import load_runner_class

    return [f for name in load_runner_class(runner).DEGRADATION_NAMES for f in ("--accept-degraded", name)]


def cli_exe(report: Report) -> str | None:
    """The console script next to this interpreter, not whatever PATH finds
    first: a version-manager shim (pyenv's is a chain of bash scripts) would be
    timed too.  ``None``, reported, when it is not installed."""
    beside = Path(sys.executable).parent / "dsh-sandbox"
    exe = str(beside) if beside.is_file() else shutil.which("dsh-sandbox")
    if exe is None:
        report.skipped["cli"] = "dsh-sandbox is not installed next to this interpreter nor on PATH"
    return exe


def cli_env() -> dict[str, str]:
    """This environment with bytecode written, as on a user's machine."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _kept_labels(runner: str) -> tuple[str, str]:
    """The first-call and warm-call rows of a runner whose sandbox outlives a run."""
    return (f"dsh-sandbox run --runner {runner} --keep-warm 0 -- true (first call)",
            f"dsh-sandbox run --runner {runner} -- true (warm call)")


def _kept_commands(exe: str, runners: Sequence[str]) -> list[tuple[str, list[str]]]:
    commands = []
    for runner in runners:
        first, warm = _kept_labels(runner)
        flags = ["run", "--runner", runner, *degradation_flags(runner)]
        commands += [(first, [exe, *flags, "--keep-warm", "0", "--", "true"]),
                     (warm, [exe, *flags, "--keep-warm", _BENCH_KEEP_S, "--", "true"])]
    return commands


def _cli_commands(exe: str, runners: Sequence[str]) -> list[tuple[str, list[str]]]:
    commands = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("dsh-sandbox --version", [exe, "--version"]),
        ("dsh-sandbox --help", [exe, "--help"]),
        ("dsh-sandbox run --mode danger-full-access -- true", [exe, "run", "--mode", "danger-full-access", "--",
                                                             "true"]),
    ]
    for runner in runners:
        commands.append((_run_label(runner), [exe, "run", "--runner", runner, *degradation_flags(runner), "--",
                                              "true"]))
    return commands


def peer_commands(peers: Sequence[str], workspace: Path, report: Report) -> list[tuple[str, list[str]]]:
    """The argv of each peer found on PATH; the others are reported as skipped."""
    found = []
    for peer in peers:
        path = shutil.which(peer)
        if path is None:
            report.skipped[f"peer {peer}"] = f"{peer} is not on PATH"
            continue
        argv = [a.replace("{workspace}", str(workspace)) for a in PEERS[peer]]
        found.append((f"{peer} {' '.join(argv)}", [path, *argv]))
    return found


def _measure_interleaved(commands: Sequence[tuple[str, list[str]]], n: int, workspace: Path,
                         env: dict[str, str], report: Report) -> None:
    """Each command once per round, ``n`` rounds: the machine's drift is shared alike.
    A command that fails (a runner this host lacks) is reported and dropped."""
    live = list(commands)
    samples: dict[str, list[float]] = {label: [] for label, _ in live}
    for round_ in range(n + 2):  # two warm-up rounds
        for label, argv in list(live):
            t0 = time.perf_counter()
            done = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, check=False)
            elapsed = (time.perf_counter() - t0) * 1000
            if done.returncode != 0:
                report.skipped[label] = (f"exited {done.returncode}: "
                                         + done.stderr.decode(errors="replace").strip()[-300:])
                live.remove((label, argv))
            elif round_ >= 2:
                samples[label].append(elapsed)
    report.timings += [summary(label, samples[label], "interleaved") for label, _ in live]


def bench_cli(report: Report, n: int, workspace: Path, runners: Sequence[str], peers: Sequence[str] = ()) -> None:
    """The CLI as people and CI start it, against ``python -c pass`` of the same
    interpreter and the peers on PATH, with bytecode cached as on a user's machine.
    Each local runner in ``runners`` has a ``run -- true`` row; the first is set against the peers."""
    exe = cli_exe(report)
    if exe is None:
        return
    local = _local(runners)
    from dsh.sandbox.registry import load_runner_class

    kept = [r for r in _known(runners) if load_runner_class(r).keeps_warm]
    own = [*_cli_commands(exe, local), *_kept_commands(exe, kept)]
    peer = peer_commands(peers, workspace, report)
    _measure_interleaved([*own, *peer], n, workspace, cli_env(), report)
    for runner in kept:
        first, warm = _kept_labels(runner)
        report.targets.append((warm, first, KEPT_TARGET, "<="))
    for label in ("dsh-sandbox --version", "dsh-sandbox --help"):
        report.targets.append((label, "python -c pass", CLI_START_TARGET, "<="))
    for runner in local:
        report.targets.append((_run_label(runner), "python -c pass", CLI_RUN_TARGET, "<="))
    for label, _ in peer if local else ():
        report.targets.append((_run_label(local[0]), label, PEER_TARGET, "<="))  # twice as fast as each peer


_THROUGHPUT_CHILD = """
import sys, time
from dsh.sandbox.session import build_session
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.session import SessionSpec
ctx = build_session(SessionSpec(sandboxed=False, executor="bash-local", executor_config={"cwd": sys.argv[1]}))
shell = ctx.require(ShellExecutor)
spec = shell.resolve(ShellExecRequest(command="head -c 1073741824 /dev/zero", timeout_ms=600000))
t0 = time.perf_counter()
r = shell.execute(spec).result()
dt = time.perf_counter() - t0
ctx.close()
# VmHWM: this image's own peak (ru_maxrss would include the forking parent's size).
hwm = [l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(r.stdout.total_bytes, dt, hwm)
"""


def bench_throughput(report: Report, workspace: Path) -> None:
    """1 GiB of stdout through run(), in a fresh interpreter so peak RSS is its own."""
    out = subprocess.run([sys.executable, "-c", _THROUGHPUT_CHILD, str(workspace)], check=True,
                         capture_output=True, text=True).stdout.split()
    total, seconds, rss_kib = int(out[0]), float(out[1]), int(out[2])
    report.extra["1 GiB stdout"] = {
        "bytes": total, "seconds": round(seconds, 3), "MiB/s": round(total / seconds / 2**20, 1),
        "peak_rss_MiB": round(rss_kib / 1024, 1), "target_peak_rss_MiB": 100,
    }


def bench_concurrency(report: Report, runners: Sequence[str], workspace: Path, per_thread: int) -> None:
    """32 threads each running ``per_thread`` commands; commands per second."""
    results: dict[str, float] = {}
    for runner, ctx in sessions(report, (None, *runners), workspace, "32x {}"):
        label = runner or "bash-local"
        run = _runner_true(ctx)
        errors: list[BaseException] = []

        def worker(run: Callable[[], object] = run, errors: list[BaseException] = errors) -> None:
            try:
                for _ in range(per_thread):
                    run()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(32)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        if errors:
            report.skipped[f"32x {label}"] = f"{type(errors[0]).__name__}: {errors[0]}"
            continue
        results[label] = 32 * per_thread / dt
    base = results.get("bash-local")
    report.extra["32 concurrent"] = {
        k: {"commands_per_s": round(v, 1), "vs_bash_local": round(v / base, 2) if base else None}
        for k, v in results.items()
    }
    from dsh.sandbox.registry import load_runner_class

    targets = [f"{name} >= {ratio}x bash-local" for name in results if name != "bash-local"
               if (ratio := load_runner_class(name).SPEED_TARGETS.concurrent_vs_local) is not None]
    if targets:
        report.extra["32 concurrent"]["target"] = "; ".join(targets)


def compute_ratios(report: Report) -> None:
    for name, base, target, op in report.targets:
        a, b = report.timing(name), report.timing(base)
        if a is None or b is None or b.median_ms == 0:
            continue
        ratio = a.median_ms / b.median_ms
        met = ratio <= target if op == "<=" else ratio >= target
        report.ratios.append({"measure": name, "baseline": base, "ratio": round(ratio, 2),
                              "target": f"{op} {target}x", "met": met})


def _local(runners: Sequence[str]) -> list[str]:
    """The runners that wrap a local process (concurrency is measured on this host)."""
    from dsh.sandbox.registry import load_runner_class

    return [name for name in _known(runners) if not load_runner_class(name).remote]


def _known(runners: Sequence[str]) -> list[str]:
    """The runners whose code loads here."""
    from dsh.sandbox.registry import RunnerLoadError, load_runner_class

    known = []
    for name in runners:
        try:
            load_runner_class(name)
        except (RunnerLoadError, DshError):
            continue
        known.append(name)
    return known


def run_all(runners: Sequence[str], n: int, *, throughput: bool = True, per_thread: int = 10,
            peers: Sequence[str] = (), more: Sequence[tuple[str, Section]] = ()) -> Report:
    report = Report()
    workspace = Path(tempfile.mkdtemp(prefix="dsh-bench-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    sections: list[tuple[str, Callable[[], None]]] = [
        ("runners", lambda: bench_runners(report, runners, n, workspace)),
        ("cli", lambda: bench_cli(report, n, workspace, runners, peers)),
        ("1 GiB stdout", lambda: bench_throughput(report, workspace) if throughput else None),
        ("32 concurrent", lambda: bench_concurrency(
            report, _local(runners), workspace, per_thread)),
        *((name, lambda section=section: section(report, workspace)) for name, section in more),
    ]
    try:
        for name, section in sections:
            try:
                section()
            except subprocess.CalledProcessError as exc:
                err = exc.stderr.decode(errors="replace")[-300:] if isinstance(exc.stderr, bytes) else exc.stderr
                report.skipped[name] = f"{exc.cmd} exited {exc.returncode}: {err or ''}".strip()
            except Exception as exc:  # a broken measure is reported, the rest still runs
                report.skipped[name] = f"{type(exc).__name__}: {exc}"
        compute_ratios(report)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return report


def render_table(report: Report) -> str:
    lines = ["| measure | samples | median ms | p95 ms |", "|---|---:|---:|---:|"]
    lines += [f"| {t.name} | {t.samples} | {t.median_ms:.2f} | {t.p95_ms:.2f} |" for t in report.timings]
    if report.ratios:
        lines += ["", "| measure | baseline | ratio | target | met |", "|---|---|---:|---|---|"]
        lines += [f"| {r['measure']} | {r['baseline']} | {r['ratio']:.2f}x | {r['target']} | "
                  f"{'yes' if r['met'] else 'no'} |" for r in report.ratios]
    for key, value in report.extra.items():
        lines += ["", f"{key}: {json.dumps(value)}"]
    for key, why in report.skipped.items():
        lines += [f"skipped {key}: {why}"]
    return "\n".join(lines)


def to_json(report: Report) -> str:
    return json.dumps({"timings": [asdict(t) for t in report.timings], "ratios": report.ratios,
                       "extra": report.extra, "skipped": report.skipped,
                       "machine": {"python": sys.version.split()[0], "cpus": os.cpu_count()}}, indent=2)
