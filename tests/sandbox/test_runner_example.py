"""The runner of ``docs/runners.md``, as written there: installed as a separate
distribution (a ``*.dist-info`` with its entry point), found by name and run
through ``build_session`` like any runner; and the preamble every runner
shares (argv, probe once, the gate) that lets it be this small."""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from dsh.sandbox.errors import SandboxUnavailable, UsageError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import ResourceLimits, SandboxPolicy
from dsh.sandbox.registry import known_runner_names
from dsh.sandbox.runner import RunnerProbe
from dsh.sandbox.session import SessionSpec, build_session

from tests.support.executors import run
from tests.support.plugins import install_plugin
from tests.support.require import require_runner
from tests.support.wait import PATIENCE_S

DOC = Path(__file__).resolve().parents[2] / "docs" / "runners.md"


def example_source() -> str:
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"<!-- example: rojail\.py -->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/runners.md lost its example"
    return found.group(1)


@pytest.fixture
def rojail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example as a third-party distribution on sys.path."""
    install_plugin(tmp_path, monkeypatch, "rojail", example_source(),
                   "[dsh_sandbox.runners]\nrojail = rojail:ReadOnlyJail\n")
    import rojail as module

    yield module


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    return ws


def session(workspace: Path, mode: str) -> Any:
    return build_session(SessionSpec(mode=mode, workspace=str(workspace), runner="rojail",
                                     executor="bash-sandbox", executor_config={"cwd": str(workspace)}))


def test_the_example_is_two_methods_and_four_names() -> None:
    tree = ast.parse(example_source())
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    methods = {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}
    assert methods == {"detect", "wrap"}
    names = {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("dsh.") for alias in node.names}
    assert names == {"Runner", "RunnerProbe", "LocalLaunch", "SandboxUnavailable"}


def test_installed_from_its_own_distribution_it_runs_read_only(
    rojail: ModuleType, workspace: Path, tmp_path: Path
) -> None:
    require_runner("bwrap")  # the example wraps with bubblewrap
    assert "rojail" in known_runner_names()
    outside = tmp_path / "outside"
    outside.mkdir()
    with session(workspace, "read-only") as ctx:
        done = run(ctx, "echo hi; grep ^CapEff /proc/self/status")
        assert done.exit_code == 0, done.stderr.text
        assert done.stdout.text.split("\n")[:2] == ["hi", "CapEff:\t0000000000000000"], done.stdout.text
        assert done.sandbox is not None and done.sandbox.runner == "rojail"
        denied = run(ctx, f"echo x > written; echo x > {outside}/written")
        assert denied.exit_code != 0
        assert "Read-only file system" in denied.stderr.text, denied.stderr.text
    assert not (workspace / "written").exists() and not (outside / "written").exists()


def test_a_mode_it_does_not_claim_is_refused_before_anything_runs(rojail: ModuleType, workspace: Path) -> None:
    with session(workspace, "workspace-write") as ctx:
        with pytest.raises(SandboxUnavailable, match="rojail: does not enforce workspace-write"):
            run(ctx, "echo x > written")
    assert not (workspace / "written").exists()


def test_hidden_paths_are_unreadable_and_limits_refused(rojail: ModuleType, workspace: Path, tmp_path: Path) -> None:
    require_runner("bwrap")
    runner = rojail.ReadOnlyJail()
    secret_dir, secret_file = tmp_path / "secrets", tmp_path / "token"
    secret_dir.mkdir()
    (secret_dir / "key").write_text("SECRET-IN-DIR\n")
    secret_file.write_text("SECRET-FILE\n")
    hidden = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=workspace, hidden_paths=(secret_dir, secret_file))
    launch = runner.prepare(["sh", "-c", f"cat {secret_dir}/key {secret_file}; ls -A {secret_dir}"], hidden,
                            cwd=str(workspace), env={})
    done = subprocess.run(list(launch.argv), capture_output=True, text=True, timeout=PATIENCE_S, check=False)
    assert "SECRET" not in done.stdout + done.stderr
    limited = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=workspace, limits=ResourceLimits(max_processes=8))
    with pytest.raises(SandboxUnavailable, match="sets no limits"):
        runner.prepare(["true"], limited, cwd=str(workspace), env={})


# -- the shared preamble ------------------------------------------------------------------
class Counting:
    """A wrap-and-detect runner that records what the preamble let through."""

    def __init__(self, module: ModuleType, *, available: bool = True) -> None:
        base = module.ReadOnlyJail
        calls: dict[str, int] = {"detect": 0, "wrap": 0}

        class Probed(base):  # type: ignore[misc, valid-type]
            def detect(self) -> RunnerProbe:
                calls["detect"] += 1
                return RunnerProbe(self.name, available, None if available else "switched off for the test")

            def wrap(self, argv: Any, policy: Any, *, cwd: str, env: Any) -> Any:
                calls["wrap"] += 1
                return super().wrap(argv, policy, cwd=cwd, env=env)

        self.runner = Probed()
        self.calls = calls


def test_detect_is_asked_once_per_runner(rojail: ModuleType, workspace: Path) -> None:
    counting = Counting(rojail)
    policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=workspace)
    for _ in range(3):
        counting.runner.prepare(["true"], policy, cwd=str(workspace), env={})
    assert counting.runner.probe() is counting.runner.probe()
    assert counting.calls == {"detect": 1, "wrap": 3}
    assert Counting(rojail).runner.probe() is not counting.runner.probe()  # per instance


def test_the_preamble_refuses_before_wrap(rojail: ModuleType, workspace: Path) -> None:
    policy = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=workspace)
    counting = Counting(rojail)
    with pytest.raises(UsageError, match="the command is empty"):
        counting.runner.prepare([], policy, cwd=str(workspace), env={})
    with pytest.raises(UsageError, match="use str or bytes"):
        counting.runner.prepare(["echo", 3], policy, cwd=str(workspace), env={})
    off = Counting(rojail, available=False)
    with pytest.raises(SandboxUnavailable, match="rojail: switched off for the test"):
        off.runner.prepare(["true"], policy, cwd=str(workspace), env={})
    writable = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=workspace, writable_roots=(workspace,))
    with pytest.raises(SandboxUnavailable, match="does not enforce workspace-write"):
        counting.runner.prepare(["true"], writable, cwd=str(workspace), env={})
    assert counting.calls["wrap"] == 0 and off.calls["wrap"] == 0


def test_a_runner_cannot_replace_the_shared_preamble(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.sandbox.runner import Runner

    with pytest.raises(TypeError, match=r"overrides Runner\.prepare; implement wrap instead"):
        type("Skips", (Runner,), {"name": "skips", "prepare": lambda self, *a, **k: None})
    with pytest.raises(TypeError, match=r"overrides Runner\.probe; implement detect instead"):
        type("Forgets", (Runner,), {"name": "forgets", "probe": lambda self: None})
    # Installed as a plugin, such a runner is unavailable with the reason, not a crash.
    install_plugin(
        tmp_path, monkeypatch, "skips",
        "from dsh.runners.fake import FakeRunner\n"
        "class Skips(FakeRunner):\n"
        "    def prepare(self, argv, policy, *, cwd, env):\n"
        "        raise AssertionError('never reached')\n",
        "[dsh_sandbox.runners]\nskips = skips:Skips\n",
    )
    from dsh.sandbox.registry import RunnerLoadError, load_runner_class, runner_classes

    with pytest.raises(RunnerLoadError, match=r"overrides Runner\.prepare"):
        load_runner_class("skips")
    assert "skips" not in runner_classes()


def test_every_built_in_runner_writes_only_detect_and_wrap() -> None:
    from dsh.runners.fake import FakeRunner
    from dsh.sandbox.registry import known_runner_names, load_runner_class

    for cls in [FakeRunner, *(load_runner_class(n) for n in known_runner_names())]:
        assert "detect" in vars(cls) and "wrap" in vars(cls), cls
