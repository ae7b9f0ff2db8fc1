"""The policy service: canonical roots, protected paths, refusals, attack-shaped inputs."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest
from dsh.cli.policy_text import describe_policy
from dsh.sandbox.context import Context, build_context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy_service import (
    PolicyConfig,
    PolicyService,
    system_dir_reason,
)
from dsh.sandbox.profiles import ProfileError

TMP = Path(os.path.realpath("/tmp"))


pytestmark = pytest.mark.usefixtures("no_tmpdir")


def service(workspace: Path | str, **config: Any) -> PolicyService:
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def profile_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "prof.toml"
    path.write_text(text)
    return str(path)


def variant(directory: Path, *settings: str, base: str = "workspace-write") -> str:
    """A profile extending ``base`` with ``settings`` (``git = "read-only"``, ``tmp = "shared"``)."""
    path = directory / f"variant-{len(list(directory.glob('variant-*')))}.toml"
    path.write_text("\n".join([f'extends = "{base}"', *settings, ""]))
    return str(path)


GIT_RO = 'git = "read-only"'
SHARED = 'tmp = "shared"'


# -- defaults and configuration --------------------------------------------------------
def test_defaults(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)
    svc = PolicyService(Context())
    assert svc.default_mode is SandboxMode.WORKSPACE_WRITE
    assert svc.profile.name == "workspace-write"
    policy = svc.resolve()
    assert policy.workspace == workspace and policy.profile == "workspace-write"
    # The sandbox's own HOME (tests/sandbox/test_sandbox_home.py) and /tmp are roots
    # of their own; the host's /tmp is not one.
    assert policy.home is not None and policy.private_tmp is not None
    assert policy.writable_roots == tuple(sorted({workspace, policy.private_tmp, policy.home}))
    assert policy.git == "commit"
    assert policy.network is False and policy.missing_roots == ()


def test_mounts_through_the_entry_point(workspace: Path) -> None:
    ctx = build_context([{
        "name": "sandbox-policy",
        "config": {
            "mode": "read-only",
            "workspace": str(workspace),
            "writable": [],
            "accept_degraded": ["bwrap-limit-memory"],
        },
    }])
    svc = ctx.require(PolicyService)
    assert isinstance(svc, PolicyService)
    assert svc.resolve().mode is SandboxMode.READ_ONLY
    assert svc.resolve().accept_degraded == ("bwrap-limit-memory",)


def test_mode_picks_its_builtin_profile_and_profile_picks_mode(workspace: Path) -> None:
    assert service(workspace, mode="read-only").profile.name == "read-only"
    assert service(workspace, profile="read-only").default_mode is SandboxMode.READ_ONLY
    # An explicit mode wins over the profile's.
    svc = service(workspace, profile="python", mode="read-only")
    assert svc.default_mode is SandboxMode.READ_ONLY and svc.profile.name == "python"


def test_unknown_mode_and_profile_are_config_errors(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="unknown sandbox mode 'write'"):
        service(workspace, mode="write")
    with pytest.raises(ProfileError, match="did you mean 'python'"):
        service(workspace, profile="pyhton")


def test_workspace_fixed_at_configure_time(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workspace)
    svc = PolicyService(Context())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert svc.resolve().workspace == workspace == svc.workspace
    assert svc.default_policy == svc.resolve()


def test_missing_workspace(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as info:
        service(missing)
    assert str(info.value) == (f"workspace: {missing} does not exist; create it or pass --workspace DIR")


def test_workspace_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ConfigError, match=r"workspace: .*file is a file, not a directory; pass"):
        service(file)


def test_workspace_through_any_link_a_run_could_have_made_is_refused(workspace: Path, trusted_dir: Path) -> None:
    link = trusted_dir / "link"  # outside this run's roots, but any directory may have been one
    link.symlink_to(workspace)
    with pytest.raises(ConfigError, match=rf"workspace: .*pass the real path {re.escape(str(workspace))} instead"):
        service(link)
    policy = service(workspace).resolve()
    assert policy.workspace == workspace and workspace in policy.writable_roots
    assert workspace / ".dsh" in policy.protected_paths


def test_workspace_through_planted_symlink_refused(workspace: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"  # under /tmp, a writable root: a command could have made it
    link.symlink_to(workspace)
    with pytest.raises(ConfigError, match=rf"workspace: .*symlink {re.escape(str(link))} -> "):
        service(link)
    # Read-only too: the link was writable in an earlier workspace-write run.
    with pytest.raises(ConfigError, match="an earlier run could have made it"):
        service(link, mode="read-only")


def test_dotdot_in_roots_is_removed(workspace: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    policy = service(f"{workspace}/../ws", writable=(f"{workspace}/../extra/../extra",)).resolve()
    assert policy.workspace == workspace
    assert extra in policy.writable_roots
    assert all(".." not in p.parts for p in policy.writable_roots + policy.protected_paths)


# -- writable roots ---------------------------------------------------------------------
def test_missing_profile_root_is_reported_not_writable(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_VAR_DSH", raising=False)
    prof = profile_file(
        tmp_path,
        f'mode = "workspace-write"\nwritable_roots = ["{tmp_path}/gone", "$NO_SUCH_VAR_DSH/x", "rel"]\n',
    )
    (workspace / "rel").mkdir()
    policy = service(workspace, profile=prof).resolve()
    assert tmp_path / "gone" in policy.missing_roots
    assert Path("$NO_SUCH_VAR_DSH/x") in policy.missing_roots  # never guessed
    assert tmp_path / "gone" not in policy.writable_roots
    assert workspace / "rel" in policy.writable_roots  # relative to the workspace
    assert any("missing roots" in line for line in describe_policy(policy))


def test_profile_roots_expand_home_and_vars(
    workspace: Path, tmp_path: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = trusted_dir / "home"
    (home / ".cache" / "pip").mkdir(parents=True)
    (tmp_path / "v").mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DSH_TEST_ROOT", str(tmp_path / "v"))
    prof = profile_file(
        tmp_path, 'extends = "python"\nwritable_roots = ["~/.cache/pip", "~/.cache/uv", "${DSH_TEST_ROOT}"]\n'
    )
    policy = service(workspace, profile=prof).resolve()
    assert home / ".cache" / "pip" in policy.writable_roots
    assert tmp_path / "v" in policy.writable_roots
    assert home / ".cache" / "uv" in policy.missing_roots
    # Protected names hang off every writable root, caches included.
    assert home / ".cache" / "pip" / ".dsh" in policy.protected_paths


def test_a_missing_root_is_reported_not_created_from_a_flag_or_a_profile(workspace: Path, tmp_path: Path) -> None:
    # One rule for both: a missing directory is not writable, not created, and listed.
    gone = tmp_path / "gone"
    from_flag = service(workspace, writable=(str(gone),)).resolve()
    prof = profile_file(tmp_path, f'extends = "workspace-write"\nwritable_roots = ["{gone}"]\n')
    from_profile = service(workspace, profile=prof).resolve()
    for policy in (from_flag, from_profile):
        assert gone in policy.missing_roots and gone not in policy.writable_roots
    assert not gone.exists()


def test_a_root_that_is_a_file_is_refused_from_a_flag_or_a_profile(workspace: Path, tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("")
    with pytest.raises(ConfigError, match=r"--writable .*/f: .* is not a directory"):
        service(workspace, writable=(str(file),))
    prof = profile_file(tmp_path, f'extends = "workspace-write"\nwritable_roots = ["{file}"]\n')
    with pytest.raises(ConfigError, match=r"writable_roots entry .*/f.*: .* is not a directory"):
        service(workspace, profile=prof)


@pytest.mark.parametrize("root", ["/", "/etc", "/usr", "/usr/bin", "/home", "/bin", "/dev/shm"])
def test_system_roots_refused_unless_danger(workspace: Path, root: str) -> None:
    with pytest.raises(ConfigError) as info:
        service(workspace, writable=(root,))
    message = str(info.value)
    assert message.startswith(f"--writable {root}: refusing to make")
    assert "danger-full-access" in message
    # Refused at resolve time too, when a read-only session escalates.
    ro = service(workspace, mode="read-only", writable=(root,))
    with pytest.raises(ConfigError, match="refusing"):
        ro.resolve(SandboxMode.WORKSPACE_WRITE)
    full = service(workspace, mode="danger-full-access", writable=(root,)).resolve()
    assert full.writable_roots == (Path("/"),) and full.network is True


def test_system_root_via_symlink_refused(workspace: Path, trusted_dir: Path) -> None:
    link = trusted_dir / "sneaky"
    link.symlink_to("/etc")
    # The walk meets the link before the root is judged: a link where a run
    # could have planted it is refused whatever it points at.
    with pytest.raises(ConfigError, match=r"resolves through the symlink .*sneaky -> /etc"):
        service(workspace, writable=(str(link),))


def test_profile_system_root_refused(workspace: Path, tmp_path: Path) -> None:
    prof = profile_file(tmp_path, 'mode = "workspace-write"\nwritable_roots = ["/usr/../etc"]\n')
    with pytest.raises(ConfigError, match=r"writable_roots entry '/usr/\.\./etc'.*refusing"):
        service(workspace, profile=prof)


def test_workspace_root_of_filesystem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="workspace: refusing to make / writable"):
        service("/")
    assert service("/", mode="read-only").resolve().workspace == Path("/")


def test_system_dir_reason() -> None:
    assert system_dir_reason(Path("/")) == "it is the whole filesystem"
    assert system_dir_reason(Path("/usr/src/app")) is None
    assert system_dir_reason(Path("/home/me/src")) is None
    assert system_dir_reason(Path("/usr/local")) is not None  # contains /usr/local/bin
    assert system_dir_reason(Path("/usr/local/bin/x")) is not None
    assert system_dir_reason(Path("/var")) is not None
    assert system_dir_reason(Path("/var/tmp")) is None


# -- /tmp and $TMPDIR -------------------------------------------------------------------
def test_tmp_and_tmpdir(
    workspace: Path, tmp_path: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = trusted_dir / "private-tmp"
    private.mkdir()
    link = trusted_dir / "tmplink"
    link.symlink_to(private)
    monkeypatch.setenv("TMPDIR", str(private))
    shared = variant(trusted_dir, SHARED)
    policy = service(workspace, profile=shared).resolve()
    assert TMP in policy.writable_roots and private in policy.writable_roots
    assert link not in policy.writable_roots
    # $TMPDIR through a link inside /tmp: a command could have planted it there.
    planted = tmp_path / "planted"
    planted.symlink_to(private)
    monkeypatch.setenv("TMPDIR", str(planted))
    with pytest.raises(ConfigError, match=r"\$TMPDIR .*resolves through the symlink"):
        service(workspace, profile=shared)
    monkeypatch.setenv("TMPDIR", str(link))
    prof = profile_file(tmp_path, 'extends = "workspace-write"\nexclude_tmp = true\n')
    excluded = service(workspace, profile=prof).resolve()
    assert excluded.writable_roots == tuple(sorted({workspace, excluded.home}))
    assert excluded.private_tmp is None
    # Private (the default): neither /tmp nor $TMPDIR, but a directory of the session's own.
    private_policy = service(workspace).resolve()
    assert TMP not in private_policy.writable_roots and private not in private_policy.writable_roots
    assert private_policy.private_tmp in private_policy.writable_roots


def test_missing_tmpdir_is_reported(
    workspace: Path, tmp_path: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "gone"))
    policy = service(workspace, profile=variant(trusted_dir, SHARED)).resolve()
    assert tmp_path / "gone" in policy.missing_roots


def test_tmpdir_pointing_at_system_dir_refused(
    workspace: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", "/etc")
    with pytest.raises(ConfigError, match=r"\$TMPDIR \(/etc\): refusing .* tmp = \"shared\""):
        service(workspace, profile=variant(trusted_dir, SHARED))
    # A private /tmp leaves $TMPDIR alone: nothing of /etc becomes writable.
    assert Path("/etc") not in service(workspace).resolve().writable_roots


# -- read-only ------------------------------------------------------------------------
def test_read_only_has_no_writable_or_protected(workspace: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    policy = service(workspace, mode="read-only", writable=(str(extra),)).resolve()
    assert policy.writable_roots == () and policy.protected_paths == ()
    assert policy.network is False
    assert any("none (only /dev/null)" in line for line in describe_policy(policy))


# -- protected paths ----------------------------------------------------------------------
def test_protected_paths_exist_or_not(workspace: Path) -> None:
    (workspace / ".git").mkdir()
    policy = service(workspace, profile=variant(workspace.parent, GIT_RO, SHARED, base="python")).resolve()
    for name in (".git", ".dsh", ".env", ".vscode", ".idea"):
        assert workspace / name in policy.protected_paths, name
    # A missing .git is not held (git init must work); the other names are.
    for name in (".dsh", ".env", ".vscode", ".idea"):
        assert TMP / name in policy.protected_paths, name


def test_git_file_pointing_outside_protects_real_git_dir(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "elsewhere" / "repo.git"
    real.mkdir(parents=True)
    (workspace / ".git").write_text(f"gitdir: {tmp_path}/elsewhere/../elsewhere/repo.git\n")
    strict = variant(tmp_path, GIT_RO, SHARED)
    protected = service(workspace, profile=strict).resolve().protected_paths
    assert real in protected and workspace / ".git" in protected
    # A relative gitdir resolves against the .git file's directory, not the cwd.
    monkeypatch.chdir("/")
    (workspace / ".git").write_text("gitdir: ../elsewhere/repo.git\n")
    assert real in service(workspace, profile=strict).resolve().protected_paths
    # A git dir that does not exist (yet) is protected all the same.
    (workspace / ".git").write_text("gitdir: ../future.git\n")
    assert tmp_path / "future.git" in service(workspace, profile=strict).resolve().protected_paths


def test_worktree_common_git_dir_is_protected(workspace: Path, tmp_path: Path) -> None:
    main_git = tmp_path / "main" / ".git"
    wt = main_git / "worktrees" / "ws"
    wt.mkdir(parents=True)
    (wt / "commondir").write_text("../..\n")
    (workspace / ".git").write_text(f"gitdir: {wt}\n")
    protected = service(workspace, profile=variant(tmp_path, GIT_RO, SHARED)).resolve().protected_paths
    assert wt in protected and main_git in protected


def test_git_file_without_gitdir_line(workspace: Path) -> None:
    (workspace / ".git").write_text("garbage\n")
    protected = service(workspace).resolve().protected_paths
    assert workspace / ".git" in protected


def test_protected_symlink_target_is_protected(workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "secret-env"
    target.write_text("A=1")
    (workspace / ".npmrc").symlink_to(target)
    (workspace / ".dsh").symlink_to(tmp_path / "not-yet")  # dangling
    policy = service(workspace, profile="node").resolve()
    assert workspace / ".npmrc" in policy.protected_paths  # the name itself
    assert target in policy.protected_paths  # and where it leads
    assert tmp_path / "not-yet" in policy.protected_paths


def test_hidden_path_through_planted_symlink_refused(workspace: Path, tmp_path: Path) -> None:
    # The python profile hides .env; a command that replaced it by a link
    # would steer the mask away from what it should hide.
    target = tmp_path / "elsewhere"
    target.write_text("")
    (workspace / ".env").symlink_to(target)
    with pytest.raises(ConfigError, match=r"hidden_paths entry '\.env': .*symlink .*\.env -> "):
        service(workspace, profile="python")


def test_protected_paths_recomputed_per_resolve(workspace: Path, tmp_path: Path) -> None:
    svc = service(workspace, profile=variant(tmp_path, GIT_RO, SHARED))
    before = svc.resolve()
    real = tmp_path / "later.git"
    real.mkdir()
    (workspace / ".git").write_text(f"gitdir: {real}\n")
    after = svc.resolve()
    assert real not in before.protected_paths and real in after.protected_paths


# -- read-only and hidden paths ------------------------------------------------------------
def test_read_only_and_hidden_paths_canonical(
    workspace: Path, tmp_path: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = trusted_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    (workspace / "real-secrets").mkdir()
    monkeypatch.setenv("HOME", str(home))
    prof = profile_file(
        tmp_path,
        'extends = "workspace-write"\n'
        'read_only_paths = ["docs/../config", "~/.ssh"]\n'
        'hidden_paths = ["docs/../real-secrets", "~/.ssh", "missing-secret"]\n',
    )
    policy = service(workspace, profile=prof).resolve()
    assert policy.read_only_paths == tuple(sorted([workspace / "config", home / ".ssh"]))
    # Besides the profile's: dsh-sandbox's own state (other runs' HOMEs, spill files).
    assert set(policy.state_paths) <= set(policy.hidden_paths)
    profiled = tuple(p for p in policy.hidden_paths if p not in policy.state_paths)
    assert profiled == tuple(sorted([workspace / "real-secrets", home / ".ssh"]))


def test_unset_var_in_hidden_path_fails_closed(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DSH_UNSET_SECRET_DIR", raising=False)
    prof = profile_file(tmp_path, 'hidden_paths = ["$DSH_UNSET_SECRET_DIR/key"]\n')
    with pytest.raises(ConfigError, match=r"hidden_paths entry .* unset environment variable"):
        service(workspace, profile=prof)


# -- network, degradations, hashing, escalation ----------------------------------------------
def test_network_precedence(workspace: Path) -> None:
    assert service(workspace, profile="node").resolve().network is True
    assert service(workspace, profile="node", network=False).resolve().network is False
    assert service(workspace, profile="python", network=True).resolve().network is True
    assert service(workspace, mode="danger-full-access", network=False).resolve().network is True


def test_equal_policies_hash_equal(workspace: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    one = service(
        workspace,
        profile="python",
        writable=(str(a), str(b)),
        accept_degraded=("landlock-limits", "bwrap-limit-memory"),
    ).resolve()
    two = service(
        workspace,
        profile="python",
        writable=(str(b), str(a), str(a)),
        accept_degraded=("bwrap-limit-memory", "landlock-limits"),
    ).resolve()
    # Each session has a private /tmp of its own, hidden from the other's runs; the rest is equal.
    assert one.private_tmp != two.private_tmp and one.private_tmp in two.state_paths
    same = dataclasses.replace(two, private_tmp=one.private_tmp, writable_roots=tuple(
        sorted({*two.writable_roots} - {two.private_tmp} | {one.private_tmp})),  # type: ignore[operator]
        hidden_paths=one.hidden_paths, state_paths=one.state_paths)
    assert one == same and hash(one) == hash(same)
    for paths in (one.writable_roots, one.protected_paths, one.accept_degraded):
        assert list(paths) == sorted(set(paths))  # type: ignore[type-var]


def test_accept_degraded_merges_profile_and_config(workspace: Path, tmp_path: Path) -> None:
    prof = profile_file(tmp_path, 'accept_degraded = ["landlock-protected-paths"]\n')
    policy = service(workspace, profile=prof, accept_degraded=("bwrap-limit-memory",)).resolve()
    assert policy.accept_degraded == ("bwrap-limit-memory", "landlock-protected-paths")


def test_escalation_resolves_another_mode_without_changing_default(workspace: Path) -> None:
    svc = service(workspace, mode="read-only")
    escalated = svc.resolve(SandboxMode.WORKSPACE_WRITE)
    assert escalated.mode is SandboxMode.WORKSPACE_WRITE and workspace in escalated.writable_roots
    assert svc.default_mode is SandboxMode.READ_ONLY
    assert svc.resolve().writable_roots == ()
    full = svc.resolve("danger-full-access")
    assert full.protected_paths == () and full.hidden_paths == ()
    assert "writes: everywhere (no sandbox; the command runs unwrapped)" in describe_policy(full)


def test_describe_policy_lists_everything(workspace: Path) -> None:
    lines = describe_policy(service(workspace, profile="python").resolve())
    text = "\n".join(lines)
    assert lines[0] == "mode: workspace-write (profile python)"
    assert f"  {workspace}/.dsh" in lines
    assert any(line.startswith("git: commit (") for line in lines)
    assert any(line.startswith("tmp: private ") for line in lines)
    assert "network: off" in lines
    assert "max_memory=4GiB" in text and "max_processes=512" in text
    assert "runners: any" in lines and "env passthrough: " in text


# -- roots that would defeat a rule -----------------------------------------------------------
def test_root_inside_protected_path_refused(workspace: Path, tmp_path: Path) -> None:
    hooks = workspace / ".git" / "hooks"
    hooks.mkdir(parents=True)
    with pytest.raises(ConfigError) as info:
        service(workspace, writable=(str(hooks),))
    assert str(info.value) == (
        f"--writable {hooks}: {hooks} is inside the protected path {hooks}, which "
        "stays read-only; drop this root or use --mode danger-full-access"
    )
    prof = profile_file(tmp_path, 'extends = "workspace-write"\ngit = "read-only"\nwritable_roots = [".git"]\n')
    with pytest.raises(ConfigError, match=r"writable_roots entry '\.git'.*protected path"):
        service(workspace, profile=prof)


def test_root_inside_hidden_or_read_only_path_refused(workspace: Path, tmp_path: Path) -> None:
    (workspace / "secrets" / "cache").mkdir(parents=True)
    for key in ("hidden_paths", "read_only_paths"):
        prof = profile_file(tmp_path, f'{key} = ["secrets"]\n')
        with pytest.raises(ConfigError, match=r"is inside the (hidden|read-only) path"):
            service(workspace, profile=prof, writable=(str(workspace / "secrets" / "cache"),))


def test_protected_symlink_to_an_ancestor_fails_closed(workspace: Path) -> None:
    # A checked-out repository can carry `.git -> ..`: protecting its target would
    # make the workspace itself read-only, so the session refuses to start.
    (workspace / ".git").symlink_to("..")
    with pytest.raises(ConfigError, match=r"workspace: .* is inside the protected path"):
        service(workspace)


def test_home_directory_is_not_a_writable_root(
    workspace: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = trusted_dir / "home"
    (home / "src").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(ConfigError, match="it is your home directory"):
        service(workspace, writable=("~",))
    with pytest.raises(ConfigError, match=r"workspace: refusing .* home directory.*--workspace"):
        service(home)
    assert home / "src" in service(workspace, writable=("~/src",)).resolve().writable_roots


def test_root_as_home_is_called_the_home_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # /root is a system directory too, but for root it is the home: say what it is.
    monkeypatch.setenv("HOME", "/root")
    with pytest.raises(ConfigError, match=r"workspace: refusing to make /root writable .*it is your home directory"):
        service(Path("/root"))


def test_fifo_git_file_and_commondir_do_not_hang(workspace: Path, tmp_path: Path) -> None:
    os.mkfifo(workspace / ".git")
    strict = variant(tmp_path, GIT_RO, SHARED)
    assert workspace / ".git" in service(workspace, profile=strict).resolve().protected_paths
    (workspace / ".git").unlink()
    gitdir = tmp_path / "wt"
    gitdir.mkdir()
    os.mkfifo(gitdir / "commondir")
    (workspace / ".git").write_text(f"gitdir: {gitdir}\n")
    assert gitdir in service(workspace, profile=strict).resolve().protected_paths


def test_flag_roots_are_relative_to_the_cwd(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cache").mkdir()
    monkeypatch.chdir(tmp_path)
    assert tmp_path / "cache" in service(workspace, writable=("cache",)).resolve().writable_roots


@pytest.mark.parametrize("name", ["danger-full-access", "node", "python", "read-only", "workspace-write"])
def test_every_builtin_resolves_in_every_mode(workspace: Path, name: str) -> None:
    svc = service(workspace, profile=name)
    assert svc.resolve().profile == name
    for mode in SandboxMode:
        policy = svc.resolve(mode)
        assert policy.mode is mode and policy.workspace == workspace
        assert describe_policy(policy)[0].startswith(f"mode: {mode.value}")


@pytest.mark.parametrize("root", ["/proc/self/root", "/proc/self/cwd/../../../../../etc", "/tmp/../etc"])
def test_proc_self_and_dotdot_traversal_refused(workspace: Path, root: str) -> None:
    with pytest.raises(ConfigError, match=rf"--writable {re.escape(root)}: refusing to make /"):
        service(workspace, writable=(root,))


def test_symlink_loops_do_not_crash(workspace: Path, tmp_path: Path) -> None:
    (workspace / ".git").symlink_to(workspace / ".git")  # points at itself
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    assert workspace / ".git" in service(workspace).resolve().protected_paths
    # A root through the loop: its first link lies where a run could have
    # planted it, so it is refused by name, as any such link (no traceback).
    prof = profile_file(tmp_path, f'writable_roots = ["{tmp_path}/loop-a"]\n')
    with pytest.raises(ConfigError, match=r"writable_roots entry .*symlink .*loop-a -> .*loop-b"):
        service(workspace, profile=prof)
    with pytest.raises(ConfigError, match=r"--writable .*symlink .*loop-a -> .*loop-b"):
        service(workspace, writable=(str(tmp_path / "loop-a"),))
