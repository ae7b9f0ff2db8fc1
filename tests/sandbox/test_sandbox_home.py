"""The sandbox's own HOME: per workspace, private, never the real home, never through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from dsh.cli.policy_text import describe_policy
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.sandbox_home import home_env, workspace_home


@pytest.fixture
def cache(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # Outside /tmp: dsh-sandbox's own state may not lie in a writable root.
    path = (trusted_dir / "cache").resolve()
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))
    monkeypatch.delenv("TMPDIR", raising=False)
    return path


def service(workspace: Path, **config: Any) -> PolicyService:
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def profile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prof.toml"
    path.write_text('extends = "workspace-write"\n' + text)
    return str(path)


def test_each_workspace_gets_a_private_home_under_the_cache(workspace: Path, tmp_path: Path, cache: Path) -> None:
    policy = service(workspace).resolve()
    home = policy.home
    assert home is not None and home.parent == cache / "dsh-sandbox" / "home"
    assert home.name.startswith("ws-") and home == workspace_home(workspace)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert home in policy.writable_roots
    # Nothing is planted or protected in it: it is never the host's home.
    assert not any(p.parent == home for p in policy.protected_paths)
    other = tmp_path / "other" / "ws"
    other.mkdir(parents=True)
    assert service(other).resolve().home not in (None, home)  # same name, another project


def test_read_only_keeps_the_same_home_without_writing_it(workspace: Path, cache: Path) -> None:
    policy = service(workspace, mode="read-only").resolve()
    assert policy.home == workspace_home(workspace) and policy.writable_roots == ()
    assert any(line.startswith("HOME: ") and "read-only" in line for line in describe_policy(policy))


def test_danger_full_access_keeps_the_real_home(workspace: Path, cache: Path) -> None:
    assert service(workspace, mode="danger-full-access").resolve().home is None


def test_host_turns_it_off(workspace: Path, tmp_path: Path, cache: Path) -> None:
    policy = service(workspace, profile=profile(tmp_path, 'home = "host"\n')).resolve()
    assert policy.home is None and not (cache / "dsh-sandbox" / "home").exists()
    assert "HOME: the real home (read-only, minus the hidden paths)" in describe_policy(policy)


def test_a_named_directory_is_used_and_must_exist(workspace: Path, tmp_path: Path, cache: Path) -> None:
    mine = tmp_path / "my-home"
    with pytest.raises(ConfigError, match=r"home = .*my-home.* is not an existing directory"):
        service(workspace, profile=profile(tmp_path, f'home = "{mine}"\n'))
    mine.mkdir()
    policy = service(workspace, profile=profile(tmp_path, f'home = "{mine}"\n')).resolve()
    assert policy.home == mine.resolve() and mine.resolve() in policy.writable_roots


def test_the_real_home_is_refused_as_the_sandbox_home(workspace: Path, tmp_path: Path, cache: Path) -> None:
    with pytest.raises(ConfigError, match=r"home: refusing to make .* writable in workspace-write"):
        service(workspace, profile=profile(tmp_path, 'home = "~"\n'))


def test_a_planted_link_is_refused(workspace: Path, tmp_path: Path, cache: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = workspace_home(workspace)
    home.parent.mkdir(parents=True)
    home.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"home: .* (symlink|resolves through)"):
        service(workspace)


def test_another_users_directory_is_refused(workspace: Path, cache: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: needs root to give the directory away")
    home = workspace_home(workspace)
    home.mkdir(parents=True)
    os.chown(home, 65534, 65534)
    with pytest.raises(ConfigError, match=r"belongs to uid 65534"):
        service(workspace)


def test_no_writable_cache_dir_keeps_the_real_home(workspace: Path, trusted_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(trusted_dir / "a-file" / "cache"))
    (trusted_dir / "a-file").write_text("not a directory")
    assert service(workspace).resolve().home is None


def test_env_moves_home_and_keeps_the_users_settings(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / ".config").mkdir(parents=True)
    (real / ".gitconfig").write_text("[user]\n\tname = me\n")
    sandbox = tmp_path / "sandbox"
    env = home_env(sandbox, {"HOME": str(real)})
    assert env == {
        "HOME": str(sandbox),
        "XDG_CACHE_HOME": str(sandbox / ".cache"),
        "GIT_CONFIG_GLOBAL": str(real / ".gitconfig"),
        "XDG_CONFIG_HOME": str(real / ".config"),
    }
    # A hidden setting is not pointed at; a passed-through variable wins.
    env = home_env(sandbox, {"HOME": str(real), "XDG_CACHE_HOME": "/mine"}, hidden=[real / ".gitconfig"])
    assert "GIT_CONFIG_GLOBAL" not in env and "XDG_CACHE_HOME" not in env


def test_profile_home_must_be_a_string(workspace: Path, tmp_path: Path, cache: Path) -> None:
    with pytest.raises(ConfigError, match=r"home.*must be a non-empty string"):
        service(workspace, profile=profile(tmp_path, "home = false\n"))


def test_mode_is_reported(workspace: Path, cache: Path) -> None:
    policy = service(workspace).resolve()
    assert policy.mode is SandboxMode.WORKSPACE_WRITE
    assert policy.to_dict()["home"] == str(policy.home)


def test_a_workspaces_home_is_named_by_the_sha256_of_its_path() -> None:
    """The name must not change between versions (a HOME would be lost): the
    digest is SHA-256 whichever module computes it."""
    import hashlib

    ws = Path("/srv/some project/app")
    expected = hashlib.sha256(os.fsencode(ws)).hexdigest()[:12]
    assert workspace_home(ws, {"XDG_CACHE_HOME": "/c"}) == Path(f"/c/dsh-sandbox/home/app-{expected}")
