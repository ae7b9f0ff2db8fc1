"""Hostile input to ``run`` and ``profile validate``: numbers, names and writable roots.

Each case must be refused with exit 2 and a message naming the field, before
anything runs, and ``profile validate`` must refuse exactly what ``run``
refuses: a value that slips through becomes a run without the limit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import cli

DANGER = ("--mode", "danger-full-access")
BAD_TIMEOUTS = ("inf", "-inf", "nan", "1e400", "Infinity", "1e99999", "", "0.0000001")


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_bad_timeout_is_refused(workspace: Path, value: str) -> None:
    marker = workspace / "ran"
    done = cli("run", *DANGER, "--timeout", value, "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, (value, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr
    assert b"--timeout" in done.stderr
    assert not marker.exists()


def test_largest_finite_timeout_is_capped_not_dropped(workspace: Path) -> None:
    done = cli("run", *DANGER, "--timeout", "1e308", "--", "true", cwd=workspace)
    assert b"Traceback" not in done.stderr
    assert done.returncode == 2 or b"--timeout capped at" in done.stderr, done.stderr


BAD_LIMITS = {
    "wall_time_s inf": ("wall_time_s", "inf"),
    "wall_time_s nan": ("wall_time_s", "nan"),
    "wall_time_s 1e400": ("wall_time_s", "1e400"),
    "max_processes huge": ("max_processes", "1" + "0" * 30),
    "max_processes float": ("max_processes", "1e400"),
    "max_memory nan": ("max_memory", '"nan"'),
    "max_memory 1e400": ("max_memory", '"1e400"'),
    "max_memory negative": ("max_memory", '"-1GiB"'),
    "max_memory absurd": ("max_memory", '"99999999999EiB"'),
    "max_file_size inf": ("max_file_size", '"inf"'),
    # Below the floors no command starts: refused up front, not a SIGKILL or a daemon error.
    "wall_time_s below a millisecond": ("wall_time_s", "0.0000001"),
    "max_processes 1": ("max_processes", "1"),
    "max_memory 1 byte": ("max_memory", "1"),
    "max_memory 8MiB": ("max_memory", '"8MiB"'),
}


@pytest.mark.parametrize("case", sorted(BAD_LIMITS))
def test_bad_limit_is_refused(workspace: Path, tmp_path: Path, case: str) -> None:
    key, value = BAD_LIMITS[case]
    profile = tmp_path / "p.toml"
    profile.write_text(f'extends = "workspace-write"\n[limits]\n{key} = {value}\n')
    validated = cli("profile", "validate", str(profile), cwd=workspace)
    assert validated.returncode == 2, (case, validated.stdout, validated.stderr)
    assert key.encode() in validated.stderr + validated.stdout
    marker = workspace / "ran"
    done = cli("run", *DANGER, "--profile", str(profile), "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr and key.encode() in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [("max_memory", "1", b"from 16777216 to"), ("max_processes", "1", b"from 4 to"),
     ("wall_time_s", "0.0000001", b"from 0.001 to")],
)
@pytest.mark.parametrize("runner", ["bwrap", "docker"])
def test_limit_below_its_floor_names_field_range_and_fix(
    workspace: Path, tmp_path: Path, key: str, value: str, shown: bytes, runner: str
) -> None:
    """Sandboxed runs used to start and die (SIGKILL, "Cannot fork", a raw
    daemon error, an internal field name): now refused before anything runs."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'extends = "workspace-write"\n[limits]\n{key} = {value}\n')
    validated = cli("profile", "validate", str(profile), cwd=workspace)
    assert validated.returncode == 2 and shown in validated.stderr, validated.stderr
    done = cli("run", "--runner", runner, "--profile", str(profile), "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"limits.{key}".encode() in done.stderr and shown in done.stderr and b"write " in done.stderr
    assert b"Traceback" not in done.stderr and not (workspace / "ran").exists()


def test_unknown_degradation_name_is_refused(workspace: Path, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('extends = "workspace-write"\naccept_degraded = ["landlock-protected-path"]\n')
    done = cli("profile", "validate", str(profile), cwd=workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"landlock-protected-path" in done.stderr


@pytest.mark.parametrize("root", ["{home}/.ssh", "{home}", "{home}/.config/systemd"])
def test_dangerous_writable_root_is_refused(workspace: Path, tmp_path: Path, root: str) -> None:
    home = tmp_path / "home"
    path = Path(root.format(home=home))
    path.mkdir(parents=True, exist_ok=True)
    marker = workspace / "ran"
    env = {**os.environ, "HOME": str(home)}
    done = cli("run", "--mode", "workspace-write", "--writable", str(path), "--", "touch", str(marker),
               cwd=workspace, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert os.fsencode(path) in done.stderr and b"Traceback" not in done.stderr
    assert not marker.exists()
