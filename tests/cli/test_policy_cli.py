"""``run`` and ``tool call`` refuse, before anything runs, what would let a
sandboxed command widen a later policy, and every out-of-range number."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.sandboxed import need_runner

DANGER = ("--mode", "danger-full-access")


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    env.update(extra)
    return env


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e308", "1e400", "-1", "0", "1000000000000"])
def test_timeout_out_of_range_exits_2_before_running(workspace: Path, value: str) -> None:
    marker = workspace / "ran"
    done = cli("run", *DANGER, "--timeout", value, "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, done.stderr
    if value.lstrip("-").isdigit():
        assert b"--timeout: must be a number of seconds from 1 ms to 366 days, got " in done.stderr
    else:  # not written as digits: float() would take it, the flag does not
        assert b"Invalid value for '--timeout': '" + value.encode() + b"' is not a number of seconds" in done.stderr
    assert b"Traceback" not in done.stderr and not marker.exists()


@pytest.mark.parametrize(
    "limit",
    ["wall_time_s = nan", "wall_time_s = inf", "max_processes = -1", 'max_memory = "1e400"',
     "max_file_size = 100000000000000000000000000000"],
)
def test_profile_limit_out_of_range_exits_2_before_running(
    workspace: Path, trusted_dir: Path, limit: str
) -> None:
    prof = trusted_dir / "p.toml"
    prof.write_text(f'extends = "danger-full-access"\n[limits]\n{limit}\n')
    marker = workspace / "ran"
    done = cli("run", "--profile", str(prof), "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2 and b"limits." in done.stderr and b"line 3" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr and not marker.exists()


def test_tool_arguments_non_finite_numbers_are_an_error(workspace: Path) -> None:
    for raw in ('{"command": "true", "description": "x", "timeout_ms": Infinity}',
                '{"command": "true", "description": "x", "timeout_ms": NaN}',
                '{"command": "true", "description": "x", "timeout_ms": 1e400}'):
        done = cli("tool", "call", "bash", raw, "--mode", "danger-full-access", cwd=workspace)
        assert done.returncode == 1 and b"timeout_ms: must be an integer" in done.stdout, done
        assert b"Traceback" not in done.stderr


# -- configuration files a sandboxed command could rewrite --------------------------------
def test_rules_file_in_the_workspace_is_refused_before_running(workspace: Path) -> None:
    # The README's old example: a relative rules file, i.e. in the workspace.
    (workspace / "approvals.toml").write_text(
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{workspace}"\ncommand = "touch ran"\n'
    )
    done = cli("run", "--mode", "read-only", "--approval", "rules:approvals.toml", "--",
               "touch", "ran", cwd=workspace)
    assert done.returncode == 2, done.stderr
    assert b"approval rules file approvals.toml:" in done.stderr
    assert b"lies inside the writable root" in done.stderr and b"~/.config/dsh-sandbox/" in done.stderr
    assert not (workspace / "ran").exists()


def test_rules_file_in_dot_dsh_is_refused_too(workspace: Path) -> None:
    (workspace / ".dsh").mkdir()
    (workspace / ".dsh" / "rules.toml").write_text("")
    done = cli("run", *DANGER, "--approval", "rules:.dsh/rules.toml", "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2 and b"lies inside the writable root" in done.stderr
    assert not (workspace / "ran").exists()


def test_missing_rules_file_is_reported_before_running(workspace: Path, trusted_dir: Path) -> None:
    done = cli("run", *DANGER, "--approval", f"rules:{trusted_dir}/nope.toml", "--", "touch", "ran",
               cwd=workspace)
    assert done.returncode == 2 and b"cannot read rules file" in done.stderr
    assert not (workspace / "ran").exists()


def test_profile_and_composition_in_tmp_are_refused(workspace: Path, tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text('extends = "danger-full-access"\n')
    done = cli("run", "--profile", str(prof), "--", "touch", "ran", cwd=workspace, )
    assert done.returncode == 2 and f"profile {prof}:".encode() in done.stderr, done.stderr
    comp = tmp_path / "c.yaml"
    comp.write_text("- {name: sandbox-policy, config: {mode: danger-full-access}}\n- {name: bash-local}\n")
    done = cli("run", "--composition", str(comp), "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2 and f"--composition {comp}:".encode() in done.stderr, done.stderr
    args = json.dumps({"command": "touch ran", "description": "x"})
    done = cli("tool", "call", "bash", args, "--composition", str(comp), cwd=workspace)
    assert done.returncode == 2 and b"lies inside the writable root" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()


def test_tool_call_refuses_rules_in_the_workspace(workspace: Path) -> None:
    (workspace / "rules.toml").write_text("")
    args = json.dumps({"command": "touch ran", "description": "x"})
    done = cli("tool", "call", "bash", args, "--mode", "read-only", "--workspace", str(workspace),
               "--approval", f"rules:{workspace}/rules.toml", cwd=workspace)
    assert done.returncode == 2 and b"approval rules file" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()


# -- dangerous workspace and roots --------------------------------------------------------
def test_workspace_write_in_home_refused_unless_forced(trusted_dir: Path) -> None:
    need_runner("bwrap")
    home = trusted_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    home.chmod(0o777)
    env = env_with(HOME=str(home))
    done = cli("run", "--runner", "bwrap", "--", "touch", "ran", cwd=home, env=env)
    assert done.returncode == 2 and b"workspace: refusing to make" in done.stderr, done.stderr
    assert b"your home directory" in done.stderr and b"--force-writable" in done.stderr
    assert not (home / "ran").exists()
    done = cli("run", "--runner", "bwrap", "--writable", str(home / ".ssh"), "--", "true",
               cwd=trusted_dir, env=env)
    assert done.returncode == 2 and b"refusing to make" in done.stderr and b".ssh" in done.stderr
    project = trusted_dir / "project"  # beside the home, not around it (that holds ~/.dsh)
    project.mkdir()
    forced = cli("run", "--runner", "bwrap", "--writable", str(home / ".ssh"), "--force-writable",
                 str(home / ".ssh"), "--", "touch", str(home / ".ssh" / "ran"), cwd=project, env=env)
    assert forced.returncode == 0, forced.stderr
    assert (home / ".ssh" / "ran").exists()
    # The home holds dsh-sandbox's own state (~/.dsh, ~/.config/dsh-sandbox): no force lifts that.
    forced = cli("run", "--runner", "bwrap", "--force-writable", str(home), "--", "touch", "ran",
                 cwd=home, env=env)
    assert forced.returncode == 2 and b"of dsh-sandbox" in forced.stderr, forced.stderr
    assert b"--force-writable cannot lift this" in forced.stderr and not (home / "ran").exists()


def test_workspace_through_a_planted_link_refused(tmp_path: Path, workspace: Path) -> None:
    link = tmp_path / "proj"
    link.symlink_to(workspace)
    done = cli("run", "--mode", "read-only", "--workspace", str(link), "--", "true", env=env_with())
    assert done.returncode == 2, done.stderr
    assert f"symlink {link} -> {workspace}".encode() in done.stderr


@pytest.mark.parametrize("runner", ["bwrap", "docker"])
def test_a_link_an_earlier_session_planted_is_refused(trusted_dir: Path, runner: str) -> None:
    """Session A links to another tree inside its own workspace; a later run
    that names the link as its workspace or a writable root must not write
    through it, even though the link lies outside that run's roots."""
    need_runner(runner)
    session_a, session_b, other = (trusted_dir / name for name in ("ws-a", "ws-b", "other-project"))
    for directory in (session_a, session_b, other):
        directory.mkdir()
        directory.chmod(0o777)
    planted = cli("run", "--runner", runner, "--workspace", str(session_a), "--", "ln", "-s", str(other), "pkg",
                  cwd=session_a, env=env_with())
    assert planted.returncode == 0, planted.stderr
    link = session_a / "pkg"
    assert link.is_symlink()
    for flags in (("--workspace", str(link)), ("--writable", str(link))):
        done = cli("run", "--runner", runner, *flags, "--", "touch", str(link / "marker"),
                   cwd=session_b, env=env_with())
        assert done.returncode == 2, (flags, done.stderr)
        assert f"symlink {link} -> {other}".encode() in done.stderr
        assert f"pass the real path {other} instead".encode() in done.stderr
        assert b"Traceback" not in done.stderr
        assert not (other / "marker").exists()
    # The real path, named as such, is accepted.
    done = cli("run", "--runner", runner, "--workspace", str(other), "--", "touch", "marker",
               cwd=session_b, env=env_with())
    assert done.returncode == 0, done.stderr
    assert (other / "marker").exists()


@pytest.mark.parametrize("runner", ["bwrap", "docker"])
@pytest.mark.parametrize("flag", ["--workspace", "--writable"])
def test_system_state_trees_are_refused_before_running(trusted_dir: Path, runner: str, flag: str) -> None:
    """/var/lib holds dpkg, apt, docker and systemd state that root runs later."""
    need_runner(runner)
    marker = Path("/var/lib/dpkg" if Path("/var/lib/dpkg").is_dir() else "/var/lib") / "dsh-sandbox-test-marker"
    try:
        done = cli("run", "--runner", runner, flag, "/var/lib", "--", "touch", str(marker),
                   cwd=trusted_dir, env=env_with())
        assert done.returncode == 2, done.stderr
        assert b"refusing to make /var/lib writable" in done.stderr and b"it is /var/lib" in done.stderr
        assert b"--force-writable /var/lib" in done.stderr and b"Traceback" not in done.stderr
        assert not marker.exists()
    finally:
        marker.unlink(missing_ok=True)  # where the check failed, leave the host as it was


@pytest.mark.parametrize("how", ["flag", "profile"])
def test_a_missing_writable_root_runs_with_a_note_either_way(workspace: Path, tmp_path: Path,
                                                             trusted_dir: Path, how: str) -> None:
    need_runner("bwrap")
    gone = tmp_path / "gone"
    if how == "flag":
        flags = ["--writable", str(gone)]
    else:
        prof = trusted_dir / "gone.toml"
        prof.write_text(f'extends = "workspace-write"\nwritable_roots = ["{gone}"]\n')
        flags = ["--profile", str(prof)]
    done = cli("run", "--runner", "bwrap", *flags, "--", "sh", "-c", "echo ran", cwd=workspace)
    assert done.returncode == 0 and done.stdout == b"ran\n", done.stderr
    assert f"writable root {gone} does not exist: not created, not writable in this run".encode() in done.stderr
    assert not gone.exists()
