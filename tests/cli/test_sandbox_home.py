"""``dsh-sandbox run``: tools that write under $HOME work in workspace-write, on
every local runner and docker, while the real home stays read-only."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from tests.support.cli import cli, runner_flags, trusted_config_dir
from tests.support.sandboxed import LINUX_RUNNERS, need_runner

# What nyc's spawn-wrap does, and what pip and npm caches do.  The real home is
# written into the script: the sandbox passes no variable naming it.
SCRIPT = (
    'echo "home=$HOME"; '
    'touch "$HOME/.node-spawn-wrap-1" && mkdir -p "$XDG_CACHE_HOME/pip" && echo cached; '
    "touch {real_home}/.dsh-h8-planted 2>/dev/null || echo real-home-read-only"
)


@pytest.fixture(params=[*LINUX_RUNNERS, "docker"])
def runner(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    need_runner(name)
    return name


def _cache(tmp_path: Path) -> Path:
    """This test's XDG_CACHE_HOME, outside /tmp: dsh-sandbox's own state may
    not lie in a writable root."""
    return trusted_config_dir() / f"cache-{tmp_path.name}"


def _env(tmp_path: Path, real_home: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(_cache(tmp_path)), "HOME": str(real_home)}


def test_workspace_write_gets_a_writable_home_of_its_own(workspace: Path, tmp_path: Path,
                                                         trusted_dir: Path, runner: str) -> None:
    script = SCRIPT.format(real_home=shlex.quote(str(trusted_dir)))
    done = cli("run", *runner_flags(runner), "--mode", "workspace-write",
               "--", "bash", "-c", script, cwd=workspace, env=_env(tmp_path, trusted_dir))
    homes = list((_cache(tmp_path) / "dsh-sandbox" / "home").iterdir())
    assert len(homes) == 1 and homes[0].name.startswith("ws-")
    assert done.stdout.decode().splitlines() == [f"home={homes[0]}", "cached", "real-home-read-only"], done.stderr
    assert (homes[0] / ".node-spawn-wrap-1").is_file() and (homes[0] / ".cache" / "pip").is_dir()
    assert not (trusted_dir / ".dsh-h8-planted").exists()


def test_read_only_home_is_visible_but_not_writable(workspace: Path, tmp_path: Path,
                                                    trusted_dir: Path, runner: str) -> None:
    done = cli("run", *runner_flags(runner), "--mode", "read-only", "--", "bash", "-c",
               'test -d "$HOME" && echo home-visible; touch "$HOME/x" 2>/dev/null || echo home-read-only',
               cwd=workspace, env=_env(tmp_path, trusted_dir))
    assert done.stdout == b"home-visible\nhome-read-only\n", done.stderr


def test_profile_home_host_keeps_the_real_home(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    prof = trusted_dir / "host-home.toml"
    prof.write_text('extends = "workspace-write"\nhome = "host"\n')
    done = cli("run", "--runner", "bwrap", "--profile", str(prof), "--", "bash", "-c", 'echo "$HOME"',
               cwd=workspace, env=_env(tmp_path, trusted_dir))
    assert done.stdout == f"{trusted_dir}\n".encode(), done.stderr
    assert not (_cache(tmp_path) / "dsh-sandbox" / "home").exists()


# Caches the host's own tools read later without checking where an entry came
# from: pip installs a cached wheel instead of building the sdist again, uv
# links cached archives into venvs, node-gyp compiles against cached headers.
REAL_CACHES = (".cache/pip/wheels", ".cache/uv", ".cache/pypoetry", ".npm/_cacache", ".cache/yarn", ".cache/node-gyp")


@pytest.mark.parametrize("profile", ["python", "node"])
def test_builtin_profiles_leave_the_real_package_caches_read_only(
    workspace: Path, tmp_path: Path, trusted_dir: Path, runner: str, profile: str
) -> None:
    for cache in REAL_CACHES:
        (trusted_dir / cache).mkdir(parents=True)
    flags = ["--runner", runner, "--profile", profile]
    if runner == "landlock":
        flags += ["--accept-degraded", "landlock-protected-paths,landlock-metadata,landlock-process-list"]
    plant = " ".join(f"touch {shlex.quote(str(trusted_dir / cache / 'planted'))} 2>/dev/null || echo refused;"
                     for cache in REAL_CACHES)
    done = cli("run", *flags, "--", "bash", "-c", f'{plant} mkdir -p "$XDG_CACHE_HOME/pip/wheels" && echo own-cache',
               cwd=workspace, env=_env(tmp_path, trusted_dir))
    assert done.stdout.decode().splitlines() == ["refused"] * len(REAL_CACHES) + ["own-cache"], done.stderr
    assert [cache for cache in REAL_CACHES if (trusted_dir / cache / "planted").exists()] == []
    homes = list((_cache(tmp_path) / "dsh-sandbox" / "home").iterdir())
    assert len(homes) == 1 and (homes[0] / ".cache" / "pip" / "wheels").is_dir()


@pytest.mark.parametrize("runner_name", ["bwrap", "docker"])
def test_a_link_left_among_the_homes_is_named_with_how_to_remove_it(workspace: Path, tmp_path: Path,
                                                                    trusted_dir: Path, runner_name: str) -> None:
    """No run makes a link among the sandbox HOMEs: one left there refuses
    every run until it is removed, and the refusal says where it is and how,
    not "retry" as for a link swapped in by a race."""
    need_runner(runner_name)
    env = _env(tmp_path, trusted_dir)
    assert cli("run", *runner_flags(runner_name), "--", "true", cwd=workspace, env=env).returncode == 0
    planted = _cache(tmp_path) / "dsh-sandbox" / "home" / "ws-planted"
    planted.symlink_to("/etc")
    done = cli("run", *runner_flags(runner_name), "--", "true", cwd=workspace, env=env)
    assert done.returncode == 125, done.stderr
    assert b"is a symbolic link to /etc" in done.stderr and f"rm {planted}".encode() in done.stderr
    assert b"retry" not in done.stderr and b"Traceback" not in done.stderr
    planted.unlink()
    assert cli("run", *runner_flags(runner_name), "--", "true", cwd=workspace, env=env).returncode == 0
