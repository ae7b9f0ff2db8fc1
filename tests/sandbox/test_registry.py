"""The runner registry: entry points read without importlib.metadata, first distribution wins."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dsh.sandbox.context import Context
from dsh.sandbox.entry_point_files import dist_name
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host import SandboxHost, SandboxHostConfig
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.registry import RUNNER_GROUP, runner_entry_points, scan_entry_points
from hypothesis import given
from hypothesis import strategies as st


def dist(site: Path, dirname: str, entry_points: str) -> None:
    info = site / dirname
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_scan_reads_only_the_group_and_the_first_distribution_of_a_name(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    dist(first, "jail_runner-1.0.dist-info", """
        [console_scripts]
        jail = jail:main
        # a comment
        [dsh_sandbox.runners]
        jail = jail.runner:JailRunner
        """)
    dist(second, "Jail.Runner-0.9.dist-info", "[dsh_sandbox.runners]\njail = old.jail:JailRunner\nold = old:Old\n")
    dist(second, "other-2.0.egg-info", "[dsh_sandbox.runners]\nother = other:Runner\n")
    (tmp_path / "c.zip").write_bytes(b"")
    points = scan_entry_points(RUNNER_GROUP, [str(first), str(second), str(tmp_path / "c.zip"), "/nonexistent"])
    assert [(p.name, p.value, p.dist) for p in points] == [
        ("jail", "jail.runner:JailRunner", "jail-runner"),  # the older Jail.Runner is shadowed whole
        ("other", "other:Runner", "other"),
    ]


def test_builtin_runners_come_from_this_package_entry_points() -> None:
    points = runner_entry_points()
    assert {"landlock", "bwrap", "seatbelt", "docker", "gvisor", "e2b"} <= set(points)
    assert all(p.dist == "dsh-sandbox" for n, p in points.items() if n in ("landlock", "bwrap"))
    assert points["landlock"].load().__name__ == "LandlockRunner"


CHILD = """
import sys
from dsh.sandbox.context import Context
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host import SandboxHost, SandboxHostConfig
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
with Context() as ctx:
    policy = PolicyService(ctx, PolicyConfig(mode="workspace-write", workspace=sys.argv[1])).resolve()
    try:
        SandboxHost(ctx, SandboxHostConfig()).choose(policy)
    except SandboxUnavailable:
        pass
print(sorted(m for m in ("importlib.metadata", "dsh.runners.docker", "dsh.runners.e2b") if m in sys.modules))
"""


def test_auto_selection_imports_no_remote_runner_and_no_importlib_metadata(trusted_dir: Path, workspace: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(trusted_dir / "cache")}

    def imported() -> str:
        done = subprocess.run([sys.executable, "-P", "-c", CHILD, str(workspace)], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        return done.stdout.strip()

    imported()  # the first run learns the priorities (imports every runner once)
    assert (trusted_dir / "cache" / "dsh-sandbox" / "auto-order.json").is_file()
    assert imported() == "[]"


def test_a_runner_that_does_not_import_is_not_remembered_as_never_auto(
    tmp_path: Path, trusted_dir: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist(tmp_path / "site", "broken_runner-1.0.dist-info", "[dsh_sandbox.runners]\nbroken = dsh_no_such:Runner\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(trusted_dir / "cache"))
    with Context() as ctx:
        policy = PolicyService(ctx, PolicyConfig(mode="workspace-write", workspace=str(workspace))).resolve()
        with contextlib.suppress(SandboxUnavailable):
            SandboxHost(ctx, SandboxHostConfig()).choose(policy)
    assert not (trusted_dir / "cache" / "dsh-sandbox" / "auto-order.json").exists()


def test_a_relative_cache_home_is_ignored_and_nothing_lands_in_the_working_directory(
    tmp_path: Path, trusted_dir: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = trusted_dir / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    monkeypatch.chdir(tmp_path)
    with Context() as ctx:
        policy = PolicyService(ctx, PolicyConfig(mode="workspace-write", workspace=str(workspace))).resolve()
        with contextlib.suppress(SandboxUnavailable):
            SandboxHost(ctx, SandboxHostConfig()).choose(policy)
    assert not (tmp_path / "cache").exists()
    assert (home / ".cache" / "dsh-sandbox" / "auto-order.json").is_file()


@given(st.text(alphabet="aZ9-_.", max_size=12))
def test_a_distribution_name_is_normalized_as_the_packaging_rule_says(stem: str) -> None:
    dirname = f"{stem}-1.0.dist-info"
    expected = re.sub(r"[-_.]+", "-", dirname.rsplit(".", 1)[0].split("-")[0]).lower()
    assert dist_name(dirname) == expected
