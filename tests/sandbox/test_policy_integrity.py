"""Nothing a sandboxed command writes may widen a later policy: planted
symlinks, dangerous roots, untrusted configuration files, numbers."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from dsh.sandbox.config_trust import refuse_untrusted_config
from dsh.sandbox.context import Context, build_context
from dsh.sandbox.errors import CompositionError, ConfigError
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy_service import PolicyConfig, PolicyService
from dsh.sandbox.profiles import ProfileError, load_profile

pytestmark = pytest.mark.usefixtures("no_tmpdir")


@pytest.fixture
def home(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake $HOME outside /tmp (a writable root would contain it)."""
    path = trusted_dir / "home"
    for sub in (".ssh", ".gnupg", ".aws", ".config/systemd/user", ".local/bin", "src/app"):
        (path / sub).mkdir(parents=True)
    monkeypatch.setenv("HOME", str(path))
    return path


def service(workspace: Path | str, **config: Any) -> PolicyService:
    return PolicyService(Context(), PolicyConfig(workspace=str(workspace), **config))


def profile(directory: Path, text: str, name: str = "p.toml") -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


# -- symlinks a command could have planted ---------------------------------------------
def test_profile_root_through_a_link_in_the_workspace_is_refused(
    workspace: Path, trusted_dir: Path
) -> None:
    target = trusted_dir / "elsewhere"
    target.mkdir()
    (workspace / "cache").symlink_to(target)
    prof = profile(trusted_dir, 'writable_roots = ["cache"]\n')
    with pytest.raises(ConfigError) as info:
        service(workspace, profile=prof)
    message = str(info.value)
    assert "writable_roots entry 'cache'" in message  # the field
    assert f"symlink {workspace / 'cache'} -> {target}" in message  # the link
    assert f"pass the real path {target} instead" in message  # the fix


def test_flag_root_through_a_link_in_tmp_is_refused(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    (tmp_path / "proj").symlink_to(trusted_dir)
    with pytest.raises(ConfigError, match=r"--writable .*/proj: .*symlink .*/proj -> "):
        service(workspace, writable=(str(tmp_path / "proj"),))


def test_link_outside_the_roots_that_leads_through_one_inside_is_found(
    workspace: Path, trusted_dir: Path
) -> None:
    (trusted_dir / "real").mkdir()
    (workspace / "inner").symlink_to(trusted_dir / "real")  # planted
    with pytest.raises(ConfigError, match=re.escape(f"symlink {workspace / 'inner'} -> ")):
        service(workspace, writable=(str(workspace / "inner"),))
    (trusted_dir / "outer").symlink_to(workspace / "inner")  # the user's own link
    with pytest.raises(ConfigError, match=re.escape(f"symlink {trusted_dir / 'outer'} -> ")):
        service(workspace, writable=(str(trusted_dir / "outer"),))


@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_read_only_path_through_a_planted_link_is_refused(
    workspace: Path, trusted_dir: Path, mode: str
) -> None:
    (workspace / "docs").symlink_to(trusted_dir)
    prof = profile(trusted_dir, 'read_only_paths = ["docs/conf"]\n')
    with pytest.raises(ConfigError, match=r"read_only_paths entry 'docs/conf': .*where a sandboxed command may write"):
        service(workspace, profile=prof, mode=mode)


def test_links_are_checked_again_at_every_resolve(workspace: Path, trusted_dir: Path) -> None:
    (workspace / "real").mkdir()
    prof = profile(trusted_dir, 'hidden_paths = ["secret"]\n')
    svc = service(workspace, profile=prof)
    (workspace / "secret").symlink_to(workspace / "real")  # a command plants it later
    with pytest.raises(ConfigError, match="hidden_paths entry 'secret'"):
        svc.resolve()


def test_a_link_wherever_a_run_could_have_written_is_refused(workspace: Path, trusted_dir: Path) -> None:
    """Another session's workspace (or any directory that can be a writable
    root) may hold a link a command planted there: refused even though it lies
    outside this run's roots, naming the real path to pass instead."""
    (trusted_dir / "real").mkdir()
    (trusted_dir / "alias").symlink_to(trusted_dir / "real")
    attempts = [
        lambda: service(workspace, writable=(str(trusted_dir / "alias"),)),
        lambda: service(trusted_dir / "alias"),
    ]
    for attempt in attempts:
        with pytest.raises(ConfigError) as info:
            attempt()
        message = str(info.value)
        assert f"symlink {trusted_dir / 'alias'} -> {trusted_dir / 'real'}" in message
        assert f"pass the real path {trusted_dir / 'real'} instead" in message
    # The real path is accepted.
    assert trusted_dir / "real" in service(workspace, writable=(str(trusted_dir / "real"),)).resolve().writable_roots


def test_links_the_host_made_in_system_directories_are_trusted(workspace: Path, trusted_dir: Path) -> None:
    """/var/run -> /run, /lib -> usr/lib, macOS's /tmp -> /private/tmp: no
    sandboxed command can write where they live."""
    links = [p for p in ("/var/run", "/var/lock", "/lib", "/bin") if Path(p).is_symlink()]
    if not links:
        pytest.skip("SANDBOX_UNAVAILABLE: no system symlink on this host")
    quoted = ", ".join(f'"{p}"' for p in links)
    prof = profile(trusted_dir, f"read_only_paths = [{quoted}]\n")
    policy = service(workspace, profile=prof).resolve()
    assert {Path(os.path.realpath(p)) for p in links} <= set(policy.read_only_paths)


# -- dangerous writable roots ------------------------------------------------------------
@pytest.mark.parametrize("sub", [".ssh", ".gnupg", ".aws", ".config/systemd/user", ".local/bin"])
def test_credentials_and_start_up_dirs_refused_unless_forced(
    workspace: Path, home: Path, sub: str
) -> None:
    root = home / sub if sub else home
    with pytest.raises(ConfigError) as info:
        service(workspace, writable=(str(root),))
    message = str(info.value)
    assert f"refusing to make {root} writable" in message and "--force-writable" in message
    forced = service(workspace, writable=(str(root),), force_writable=(str(root),)).resolve()
    assert root in forced.writable_roots
    # Read-only sessions are not refused (nothing is writable), escalation is.
    ro = service(workspace, mode="read-only", writable=(str(root),))
    with pytest.raises(ConfigError, match="refusing"):
        ro.resolve(SandboxMode.WORKSPACE_WRITE)


@pytest.mark.parametrize("sub", ["", ".config", ".config/dsh-sandbox", ".dsh", ".cache", ".cache/dsh-sandbox",
                                 ".cache/dsh-sandbox/spill", ".cache/dsh-sandbox/home/other-0123456789ab"])
def test_roots_holding_dsh_sandbox_state_cannot_be_forced(
    workspace: Path, home: Path, sub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The home, ~/.config and ~/.cache hold it; other workspaces' HOMEs and
    # the spill files are inside it: no force lifts either direction.
    monkeypatch.delenv("XDG_CACHE_HOME")
    root = home / sub if sub else home
    root.mkdir(parents=True, exist_ok=True)
    for config in ({}, {"force_writable": (str(root),)}):
        with pytest.raises(ConfigError, match=r"of dsh-sandbox.*--force-writable cannot lift this") as info:
            service(workspace, writable=(str(root),), **config)
        assert f"--writable {root}: refusing to make {root} writable" in str(info.value)
    # The run's own HOME under the same cache stays a root of its own.
    own = service(workspace).resolve()
    assert own.home is not None and own.home in own.writable_roots
    assert own.home.parent == home / ".cache" / "dsh-sandbox" / "home"


def test_a_root_containing_credentials_is_refused(workspace: Path, home: Path, trusted_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"it contains .*\.ssh"):
        service(workspace, writable=(str(trusted_dir),))


def test_project_dirs_under_home_stay_allowed(workspace: Path, home: Path) -> None:
    assert home / "src" / "app" in service(workspace, writable=(str(home / "src/app"),)).resolve().writable_roots
    # A cache the user names is theirs to trust; the built-in profiles name none.
    (home / ".cache" / "pip").mkdir(parents=True, exist_ok=True)
    assert home / ".cache" / "pip" in service(workspace, writable=(str(home / ".cache/pip"),)).resolve().writable_roots
    assert load_profile("python").writable_roots == ()


@pytest.mark.parametrize("root", ["/var/spool", "/etc", "/"])
def test_system_roots_refused_and_only_cron_spools_can_be_forced(workspace: Path, root: str) -> None:
    if not Path(root).is_dir():
        pytest.skip(f"SANDBOX_UNAVAILABLE: {root} does not exist on this host")
    with pytest.raises(ConfigError, match="refusing") as info:
        service(workspace, writable=(root,))
    forceable = root == "/var/spool"  # read by cron as root: refused unless named
    assert ("--force-writable" in str(info.value)) == forceable
    if forceable:
        assert Path(root) in service(workspace, writable=(root,), force_writable=(root,)).resolve().writable_roots
    else:
        with pytest.raises(ConfigError, match="refusing"):
            service(workspace, writable=(root,), force_writable=(root,))


SYSTEM_STATE = [
    "/var/lib", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/docker", "/var/lib/systemd", "/var/log",
    "/var/cache", "/var/cache/apt", "/var/spool", "/var/mail", "/var/backups", "/usr/local/etc",
    "/usr/local/share", "/usr/local/bin", "/run", "/run/systemd", "/run/lock",
]


@pytest.mark.parametrize("root", SYSTEM_STATE)
def test_system_state_is_refused_as_workspace_and_writable_root(workspace: Path, root: str) -> None:
    """Package databases, container engines' state, logs, spools and root's
    PATH: a root inside one or containing one (/var/lib holds /var/lib/dpkg)."""
    if not Path(root).is_dir():
        pytest.skip(f"SANDBOX_UNAVAILABLE: {root} does not exist on this host")
    for label, attempt in (("--writable", lambda: service(workspace, writable=(root,))),
                           ("workspace", lambda: service(root))):
        with pytest.raises(ConfigError) as info:
            attempt()
        message = str(info.value)
        assert message.startswith(label) and f"refusing to make {root} writable" in message, message


def test_system_state_is_checked_both_ways() -> None:
    from dsh.sandbox.policy_guard import dangerous_root_reason

    assert "it contains /var/lib " in (dangerous_root_reason(Path("/var"), None) or "")
    assert "it is /var/lib " in (dangerous_root_reason(Path("/var/lib"), None) or "")
    assert "it is inside /var/log " in (dangerous_root_reason(Path("/var/log/app"), None) or "")
    assert dangerous_root_reason(Path("/var/tmp/ws"), None) is None
    assert dangerous_root_reason(Path("/srv/app"), None) is None
    # A home that lies in system state (a service account's) is judged as a home.
    jenkins = Path("/var/lib/jenkins")
    assert dangerous_root_reason(jenkins / "workspace/job", jenkins) is None
    assert "home directory" in (dangerous_root_reason(jenkins, jenkins) or "")
    assert "inside /var/lib/jenkins/.ssh" in (dangerous_root_reason(jenkins / ".ssh", jenkins) or "")


def test_other_users_homes_are_refused_unless_forced(home: Path) -> None:
    from dsh.sandbox.policy_guard import root_refusal

    assert root_refusal(Path("/home/alice")) == (
        "it is the home directory /home/alice (shell start-up files, ~/.ssh, ~/.config)", True)
    reason, forceable = root_refusal(Path("/home/alice/.ssh"))
    assert reason is not None and "/home/alice/.ssh" in reason and forceable
    assert root_refusal(Path("/home/alice/src/app")) == (None, True)
    assert root_refusal(Path("/Users/bob/.config/fish")) [0] is not None


def test_workspace_at_home_refused_unless_forced(home: Path, trusted_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"workspace: refusing to make .* home directory.*--workspace DIR"):
        service(home)
    assert service(home, mode="read-only").resolve().writable_roots == ()
    # A home holds dsh-sandbox's own state (~/.dsh, ~/.config/dsh-sandbox): no force lifts that.
    with pytest.raises(ConfigError, match=r"home directory.*of dsh-sandbox.*cannot lift this"):
        service(home, force_writable=(str(home),))
    prof = profile(trusted_dir, f'force_writable_roots = ["{home}"]\n')
    with pytest.raises(ConfigError, match="cannot lift this"):
        service(home, profile=prof)
    with pytest.raises(ConfigError, match="workspace: refusing to make / writable"):
        service("/", force_writable=("/",))


# -- configuration files a command could rewrite -----------------------------------------
def _ctx_with(workspace: Path, prof: str | None = None) -> Context:
    ctx = Context()
    ctx.provide(PolicyService(ctx, PolicyConfig(workspace=str(workspace), profile=prof, mode="read-only")))
    return ctx


@pytest.mark.parametrize("where", ["workspace", "dotdsh", "tmp"])
def test_profile_in_a_writable_root_is_refused(
    workspace: Path, tmp_path: Path, trusted_dir: Path, where: str
) -> None:
    directory = {"workspace": workspace, "dotdsh": workspace / ".dsh", "tmp": tmp_path}[where]
    directory.mkdir(exist_ok=True)
    prof = profile(directory, 'extends = "read-only"\n')
    with _ctx_with(workspace, prof) as ctx, pytest.raises(ConfigError) as info:
        refuse_untrusted_config(ctx, None)
    assert f"profile {prof}:" in str(info.value) and "move it outside every writable root" in str(info.value)
    with _ctx_with(workspace, profile(trusted_dir, 'extends = "read-only"\n')) as ctx:
        refuse_untrusted_config(ctx, None)  # outside: trusted


def test_extended_profile_in_a_writable_root_is_refused(workspace: Path, trusted_dir: Path) -> None:
    parent = profile(workspace, 'extends = "read-only"\n', "base.toml")
    child = profile(trusted_dir, f'extends = "{parent}"\n')
    with _ctx_with(workspace, child) as ctx, pytest.raises(ConfigError, match=re.escape(f"profile {parent}")):
        refuse_untrusted_config(ctx, None)


def test_an_escalation_log_in_a_writable_root_is_refused(workspace: Path, trusted_dir: Path) -> None:
    def approval(log: Path) -> object:
        return type("A", (), {"config": type("C", (), {"path": None, "log_file": str(log)})()})()

    with _ctx_with(workspace) as ctx:
        with pytest.raises(ConfigError, match=r"approval log_file .*lies inside the writable root"):
            refuse_untrusted_config(ctx, None, approval(workspace / "escalations.jsonl"))
        refuse_untrusted_config(ctx, None, approval(trusted_dir / "escalations.jsonl"))


def test_rules_and_composition_through_a_link_into_the_workspace_are_refused(
    workspace: Path, trusted_dir: Path
) -> None:
    (workspace / "rules.toml").write_text("")
    (trusted_dir / "rules.toml").symlink_to(workspace / "rules.toml")
    approval = type("A", (), {"config": type("C", (), {"path": str(trusted_dir / "rules.toml")})()})()
    with _ctx_with(workspace) as ctx:
        with pytest.raises(ConfigError, match=r"approval rules file .*lies inside the writable root"):
            refuse_untrusted_config(ctx, None, approval)
        with pytest.raises(ConfigError, match=r"--composition .*lies inside the writable root"):
            refuse_untrusted_config(ctx, str(workspace / "rules.toml"))


# -- numbers ------------------------------------------------------------------------------
BAD_LIMITS = [
    ("wall_time_s", "nan"), ("wall_time_s", "inf"), ("wall_time_s", "-1"), ("wall_time_s", "1e400"),
    ("wall_time_s", "0"), ("wall_time_s", "1e12"), ("max_processes", "0"), ("max_processes", "-1"),
    ("max_processes", "1.5"), ("max_processes", str(10**12)), ("max_memory", '"1e400"'),
    ("max_memory", str(10**30)), ("max_memory", "-5"), ("max_memory", "nan"),
    ("max_memory", '"99999999 TiB"'), ("max_file_size", "inf"), ("max_file_size", "0"),
    # Below the minimums: no command could start (SIGKILL, "Cannot fork", a 0 ms timeout).
    ("wall_time_s", "0.0000001"), ("max_processes", "1"), ("max_processes", "3"), ("max_memory", "1"),
    ("max_memory", '"8MiB"'),
]


@pytest.mark.parametrize(("key", "value"), BAD_LIMITS)
def test_limits_out_of_range_name_the_field_and_range(trusted_dir: Path, key: str, value: str) -> None:
    prof = profile(trusted_dir, f"[limits]\n{key} = {value}\n")
    with pytest.raises(ProfileError) as info:
        load_profile(prof)
    message = str(info.value)
    assert f"limits.{key}" in message and "line 2" in message
    assert re.search(r"from [0-9.]+ ?\w* to|is not a size|must be a size", message), message


def test_limits_in_range_are_kept(trusted_dir: Path) -> None:
    prof = profile(
        trusted_dir,
        '[limits]\nwall_time_s = 0.5\nmax_processes = 64\nmax_memory = "512MiB"\nmax_file_size = 1024\n',
    )
    limits = load_profile(prof).limits
    assert limits.wall_time_s == 0.5 and limits.max_processes == 64
    assert limits.max_memory_bytes == 512 * 1024**2 and limits.max_file_size_bytes == 1024


@pytest.mark.parametrize(
    ("field", "value"),
    [("reap_after_s", math.nan), ("reap_after_s", math.inf), ("reap_after_s", -1.0),
     ("close_wait_s", 1e300), ("max_jobs", -1), ("max_jobs", 10**20)],
)
def test_composition_numbers_are_checked(field: str, value: float) -> None:
    with pytest.raises(CompositionError, match=rf"config field {field}: must be a finite number from 0"):
        build_context([{"name": "bash-local"}, {"name": "jobs", "config": {field: value}}])


@pytest.mark.parametrize("value", [math.nan, math.inf, 0, -3])
def test_prompt_timeout_is_checked(value: float) -> None:
    from dsh.sandbox.approval import PromptApproval, PromptConfig

    with pytest.raises(ConfigError, match=r"timeout_s: must be a number of seconds from 1 ms to 366 days"):
        PromptApproval(Context(), PromptConfig(timeout_s=value))


def test_runner_options_are_checked() -> None:
    from dsh.runners.docker import DockerRunner

    with pytest.raises(ConfigError, match="docker runner pids: must be a whole number from 4 to"):
        DockerRunner({"pids": 10**9})
    with pytest.raises(ConfigError, match="docker runner memory: must be a whole number from 16777216 to"):
        DockerRunner({"memory": "99999999999g"})


# -- degradation names --------------------------------------------------------------------
def test_misspelt_degradation_is_refused_with_a_suggestion(workspace: Path, trusted_dir: Path) -> None:
    prof = profile(trusted_dir, 'accept_degraded = ["landlock-protected-path"]\n')
    with pytest.raises(ProfileError, match="did you mean 'landlock-protected-paths'"):
        load_profile(prof)
    with pytest.raises(ConfigError, match=r"accept_degraded: 'bwrap-limit-mem' is not a degradation"):
        service(workspace, accept_degraded=("bwrap-limit-mem",))


def test_every_declared_degradation_is_accepted(trusted_dir: Path) -> None:
    from dsh.sandbox.profile_schema import known_degradations

    names = sorted(known_degradations())
    assert "landlock-protected-paths" in names and "e2b-debug" in names
    prof = profile(trusted_dir, f"accept_degraded = {names!r}\n".replace("'", '"'))
    assert load_profile(prof).accept_degraded == tuple(names)


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor", "e2b", "seatbelt"])
def test_every_degradation_a_runner_reports_is_declared(runner: str) -> None:
    """A profile can only accept names the runner declares: a name reported
    in the runner's code but missing from DEGRADATION_NAMES could never be
    accepted.  Names start with the runner's name (that is how one is found)."""
    from dsh.sandbox.registry import load_runner_class

    declared = load_runner_class(runner).DEGRADATION_NAMES
    assert declared and all(name.startswith(f"{runner}-") for name in declared)
    source = Path(__file__).resolve().parents[2] / "runners" / runner
    used = {
        m.group(1)
        for path in source.glob("*.py")
        for m in re.finditer(rf'(?<![A-Za-z])"({runner}-[a-z0-9-]+)"', path.read_text())
    }
    assert used and used <= set(declared), sorted(used - set(declared))
