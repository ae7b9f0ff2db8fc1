"""Config files, ``config show`` and the settings flags, through the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import cli, trusted_config_dir
from tests.support.sandboxed import need_runner


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    """An XDG_CONFIG_HOME of its own, outside every writable root."""
    path = trusted_config_dir() / f"xdg-{tmp_path.name}"
    (path / "dsh-sandbox").mkdir(parents=True)
    return path


def env_with(user_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SANDBOX_")}
    return {**env, "XDG_CONFIG_HOME": str(user_dir), **extra}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def show(workspace: Path, env: dict[str, str], *flags: str) -> dict[str, tuple[object, str]]:
    done = cli("config", "show", "--json", *flags, cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    return {row["key"] + ("=" + row["value"] if row["key"] == "accept_degraded" else ""):
            (row["value"], row["source"]) for row in json.loads(done.stdout)["values"]}


def test_show_names_where_each_value_came_from(workspace: Path, user_dir: Path) -> None:
    user = write(user_dir / "dsh-sandbox" / "config.toml",
                 'mode = "workspace-write"\nnetwork = false\n[runners.e2b]\napi_key_env = "MY_E2B"\n')
    project = write(workspace / ".dsh" / "config.toml",
                    '# the project\nmode = "read-only"\n\n[runners.docker]\nimage = "dev:latest"\n')
    env = env_with(user_dir, DSH_SANDBOX_RUNNER="bwrap")
    rows = show(workspace, env, "--accept-degraded", "landlock-metadata")
    assert rows["mode"] == ("read-only", f"{project}:2")  # project over user
    assert rows["network"] == (False, f"{user}:2")
    assert rows["runners.e2b.api_key_env"] == ("MY_E2B", f"{user}:4")
    # The project may not choose the image: shown as not applied (below), trusted it applies.
    assert rows["runners.docker.image"] == (None, "default")
    assert show(workspace, env, "--trust-project")["runners.docker.image"] == ("dev:latest", f"{project}:5")
    assert rows["runner"] == ("bwrap", "env DSH_SANDBOX_RUNNER")  # env over files
    assert rows["runners.e2b.template"] == (None, "default")
    assert rows["accept_degraded=landlock-metadata"][1] == "flag --accept-degraded"
    rows = show(workspace, {**env, "DSH_SANDBOX_MODE": "workspace-write"}, "--mode", "read-only")
    assert rows["mode"] == ("read-only", "flag --mode")  # flag over env
    text = cli("config", "show", cwd=workspace, env=env)
    assert text.returncode == 0 and f"project config: {project}" in text.stdout.decode()


def test_project_found_up_to_the_repository_root_only(tmp_path: Path, user_dir: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / ".dsh" / "config.toml", 'mode = "read-only"\n')
    (repo / ".git").mkdir()
    sub = repo / "pkg" / "sub"
    sub.mkdir(parents=True)
    assert show(sub, env_with(user_dir))["mode"][1] == f"{repo / '.dsh' / 'config.toml'}:1"
    (repo / ".git").rmdir()  # outside a repository only the workspace itself counts
    assert show(sub, env_with(user_dir))["mode"] == (None, "default")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('modes = "read-only"\n', "config.toml:1: modes: unknown key; did you mean 'mode'?"),
        ('mode = "read-only"\nnetwork = "no"\n', "config.toml:2: network: must be true or false"),
        ('mode = "readonly"\n', "config.toml:1: mode: unknown sandbox mode 'readonly'"),
        ('[runners.docker]\nimage = 3\n', "config.toml:2: runners.docker.image: must be a non-empty string"),
        ('[runners.e2b]\napi_key = "e2b_123"\n', "a key is never written in a config file"),
        ('[env]\nGITHUB_TOKEN = "x"\n', "pass it explicitly for the run that needs it: --env GITHUB_TOKEN=VALUE"),
        ('accept_degraded = ["landlock-nope"]\n', "'landlock-nope' is not a degradation"),
        ('mode = \n', "not valid TOML"),
    ],
)
def test_bad_user_config_is_refused_before_anything_runs(
    workspace: Path, user_dir: Path, text: str, expected: str
) -> None:
    path = write(user_dir / "dsh-sandbox" / "config.toml", text)
    done = cli("run", "--mode", "danger-full-access", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2, done.stderr
    err = done.stderr.decode()
    assert expected in err and str(path) in err and "Traceback" not in err, err
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize(
    "text",
    [
        'mode = "danger-full-access"\n',
        "network = true\n",
        'accept_degraded = ["landlock-protected-paths"]\n',
        'profile = "python"\n',
        '[env]\nLD_PRELOAD = "/tmp/x.so"\n',
        '[runners.e2b]\napi_key_env = "AWS_SECRET_ACCESS_KEY"\n',
    ],
)
def test_a_project_config_may_not_weaken_the_sandbox_on_its_own(
    workspace: Path, user_dir: Path, text: str
) -> None:
    project = write(workspace / ".dsh" / "config.toml", text)
    env = env_with(user_dir)
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env)
    assert done.returncode == 2, done.stderr
    err = done.stderr.decode()
    assert f"{project}:" in err and "would weaken the sandbox" in err and "--trust-project" in err, err
    assert not (workspace / "ran").exists()
    # The user trusting the project lifts it (the values are then checked as usual).
    assert cli("config", "show", "--trust-project", cwd=workspace, env=env).returncode == 0
    write(user_dir / "dsh-sandbox" / "config.toml", f'trusted_projects = ["{workspace}"]\n')
    trusted = cli("config", "show", "--json", cwd=workspace, env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert json.loads(trusted.stdout)["files"]["project_trusted"]["value"] is True


def test_a_project_config_may_tighten_the_sandbox(workspace: Path, user_dir: Path) -> None:
    need_runner("bwrap")
    write(workspace / ".dsh" / "config.toml", 'mode = "read-only"\n')
    done = cli("run", "--runner", "bwrap", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode != 0 and b"denied under read-only" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()


def test_project_config_others_can_write_is_refused(workspace: Path, user_dir: Path) -> None:
    project = write(workspace / ".dsh" / "config.toml", 'mode = "read-only"\n')
    project.chmod(0o666)
    done = cli("config", "show", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2 and b"writable by group or others" in done.stderr, done.stderr


def test_trusted_projects_only_in_the_users_own_file(workspace: Path, user_dir: Path) -> None:
    write(workspace / ".dsh" / "config.toml", f'trusted_projects = ["{workspace}"]\nmode = "danger-full-access"\n')
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2 and b"only your own config may name trusted projects" in done.stderr
    assert not (workspace / "ran").exists()


def test_env_flag_and_config_env_reach_the_command(workspace: Path, user_dir: Path) -> None:
    need_runner("bwrap")
    write(user_dir / "dsh-sandbox" / "config.toml", '[env]\nFROM_FILE = "file"\nBOTH = "file"\n')
    done = cli("run", "--runner", "bwrap", "--env", "BOTH=flag", "--env", "API_TOKEN=t0k",
               "--", "sh", "-c", 'echo "$FROM_FILE $BOTH $API_TOKEN"', cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"file flag t0k\n"
    bad = cli("run", "--env", "NO_VALUE", "--", "true", cwd=workspace, env=env_with(user_dir))
    assert bad.returncode == 2 and b"write NAME=VALUE" in bad.stderr


def test_image_flag_needs_the_docker_runner(workspace: Path, user_dir: Path) -> None:
    done = cli("run", "--image", "dev:latest", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2 and b"--image: sets the docker runner's image" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()


def test_image_flag_picks_the_docker_image(workspace: Path, user_dir: Path) -> None:
    need_runner("docker")
    done = cli("run", "--runner", "docker", "--image", "dsh-sandbox/no-such-image:never", "--", "true",
               cwd=workspace, env=env_with(user_dir))
    # 125: the sandbox could not be set up with that image; nothing ran.
    assert done.returncode == 125 and b"image dsh-sandbox/no-such-image:never not found" in done.stderr, done.stderr


def test_accept_degraded_flag(workspace: Path, user_dir: Path) -> None:
    env = env_with(user_dir)
    bad = cli("run", "--accept-degraded", "landlock-protected-path", "--", "true", cwd=workspace, env=env)
    assert bad.returncode == 2 and b"landlock-protected-paths" in bad.stderr, bad.stderr  # the valid names
    need_runner("landlock")
    refused = cli("run", "--runner", "landlock", "--", "touch", "ran", cwd=workspace, env=env)
    assert refused.returncode == 125 and not (workspace / "ran").exists(), refused.stderr
    accepted = cli("run", "--runner", "landlock", "--accept-degraded", "landlock-protected-paths",
                   "--accept-degraded", "landlock-metadata", "--accept-degraded", "landlock-process-list",
                   "--", "touch", "ran", cwd=workspace, env=env)
    assert accepted.returncode == 0, accepted.stderr
    assert (workspace / "ran").exists()


@pytest.mark.parametrize("runner", ["bwrap", "docker", "landlock"])
def test_a_sandboxed_command_cannot_write_the_project_config(
    runner: str, workspace: Path, user_dir: Path
) -> None:
    """.dsh is protected: the command cannot create the project config (to
    configure the next run) nor change, remove or move an existing one.
    Landlock cannot protect a path inside the writable workspace, so it
    refuses workspace-write unless that degradation is accepted by name."""
    need_runner(runner)
    env = env_with(user_dir)
    create = "mkdir -p .dsh; echo 'mode = \"read-only\"' > .dsh/config.toml"
    done = cli("run", "--runner", runner, "--", "sh", "-c", create, cwd=workspace, env=env)
    assert not (workspace / ".dsh" / "config.toml").exists(), done.stderr
    if runner == "landlock":
        assert done.returncode == 125 and b"landlock-protected-paths" in done.stderr, done.stderr
        return
    assert done.returncode != 0, done.stderr
    config = write(workspace / ".dsh" / "config.toml", 'mode = "workspace-write"\n')
    for attack in (
        "echo 'runner = \"bwrap\"' >> .dsh/config.toml",
        "rm -f .dsh/config.toml",
        "mv .dsh .dsh-old && mkdir .dsh",
        "mv .dsh/config.toml .dsh/old.toml",
    ):
        done = cli("run", "--runner", runner, "--", "sh", "-c", attack, cwd=workspace, env=env)
        assert done.returncode != 0, (attack, done.stderr)
        assert config.read_text() == 'mode = "workspace-write"\n', attack
        assert sorted(p.name for p in workspace.iterdir()) == [".dsh"], attack


def test_a_user_config_a_command_could_write_is_refused(workspace: Path, tmp_path: Path) -> None:
    """$XDG_CONFIG_HOME under /tmp: a sandboxed command could rewrite the file
    that decides which projects may weaken the sandbox."""
    xdg = tmp_path / "xdg"
    user = write(xdg / "dsh-sandbox" / "config.toml", 'mode = "read-only"\n')
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env_with(xdg))
    assert done.returncode == 2, done.stderr
    assert f"user config {user}".encode() in done.stderr and b"lies inside the writable root" in done.stderr
    assert not (workspace / "ran").exists()


def test_runner_options_name_the_key_source_not_the_key(workspace: Path, user_dir: Path) -> None:
    from dsh.cli.settings import Flags, resolve

    write(user_dir / "dsh-sandbox" / "config.toml",
          '[runners.e2b]\ntemplate = "dev"\napi_key_env = "MY_E2B"\n[runners.docker]\nimage = "dev:1"\n')
    environ = {"XDG_CONFIG_HOME": str(user_dir), "MY_E2B": "e2b_secret"}
    settings = resolve(Flags(), environ, workspace)
    assert settings.runner_options(environ) == {
        "docker": {"image": "dev:1"}, "e2b": {"template": "dev", "api_key": "e2b_secret"},
    }
    # The variable unset: no key option (the runner then says what is missing).
    assert settings.runner_options({}) == {"docker": {"image": "dev:1"}, "e2b": {"template": "dev"}}
    assert "e2b_secret" not in json.dumps([list(r) for r in settings.rows()])


@pytest.mark.parametrize(
    ("user", "flags", "extra_env", "project", "why"),
    [
        # Your own stricter profile is not replaced by a built-in one.
        ('profile = "{strict}"\n', (), {}, 'profile = "workspace-write"\n', "it replaces your profile"),
        ('profile = "{strict}"\n', (), {}, 'profile = "read-only"\n', "it replaces your profile"),
        # The mode floor is the mode without the project file, wherever it came from.
        ("", ("--profile", "read-only"), {}, 'mode = "workspace-write"\n', "wider than read-only"),
        ("", (), {"DSH_SANDBOX_PROFILE": "read-only"}, 'mode = "workspace-write"\n', "wider than read-only"),
        ('profile = "{strict_ro}"\n', (), {}, 'mode = "workspace-write"\n', "wider than read-only"),
        # A prompt shows the command's own output as evidence: not the project's call.
        ("", (), {}, 'approval = "prompt"\n', "ask for a wider mode"),
    ],
)
def test_a_project_config_cannot_undo_your_own_choices(
    workspace: Path, user_dir: Path, user: str, flags: tuple[str, ...], extra_env: dict[str, str],
    project: str, why: str,
) -> None:
    strict = write(user_dir / "dsh-sandbox" / "strict.toml",
                   'extends = "workspace-write"\nhidden_paths = ["/var/tmp/dsh-never-there"]\n')
    strict_ro = write(user_dir / "dsh-sandbox" / "strict-ro.toml", 'extends = "read-only"\n')
    if user:
        write(user_dir / "dsh-sandbox" / "config.toml", user.format(strict=strict, strict_ro=strict_ro))
    write(workspace / ".dsh" / "config.toml", project)
    done = cli("run", *flags, "--", "touch", "ran", cwd=workspace, env=env_with(user_dir, **extra_env))
    err = done.stderr.decode()
    assert done.returncode == 2 and "would weaken the sandbox" in err and why in err, err
    assert not (workspace / "ran").exists()


def test_a_project_may_repeat_your_choices(workspace: Path, user_dir: Path) -> None:
    need_runner("bwrap")
    write(user_dir / "dsh-sandbox" / "config.toml", 'profile = "read-only"\nrunner = "bwrap"\n')
    write(workspace / ".dsh" / "config.toml", 'profile = "read-only"\nmode = "read-only"\napproval = "deny"\n')
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode != 0 and b"denied under read-only" in done.stderr, done.stderr


def test_accept_degraded_flag_takes_a_list_like_its_variable(workspace: Path, user_dir: Path) -> None:
    env = env_with(user_dir)
    rows = show(workspace, env, "--accept-degraded", "landlock-metadata,landlock-protected-paths")
    assert {"accept_degraded=landlock-metadata", "accept_degraded=landlock-protected-paths"} <= set(rows)
    bad = cli("config", "show", "--accept-degraded", "landlock-metadata,nope", cwd=workspace, env=env)
    assert bad.returncode == 2 and b"'nope' is not a degradation" in bad.stderr, bad.stderr


def test_runner_options_come_from_each_runners_declaration(workspace: Path, user_dir: Path) -> None:
    """Every declared key is shown; a plain run imports no runner to learn them."""
    import subprocess
    import sys

    from dsh.sandbox.registry import runner_classes

    rows = show(workspace, env_with(user_dir))
    declared = {f"runners.{name}.{key}" for name, cls in runner_classes().items() for key in cls.CONFIG_KEYS}
    assert declared and declared <= set(rows)
    assert {k for k in rows if k.startswith("runners.")} == declared
    probe = ("import sys; from pathlib import Path; from dsh.cli.settings import Flags, resolve; "
             "resolve(Flags(), {}, Path(sys.argv[1])); "
             "print(sorted(m for m in sys.modules if m.startswith('dsh.runners')))")
    done = subprocess.run([sys.executable, "-P", "-c", probe, str(workspace)], capture_output=True, text=True,
                          env=env_with(user_dir), check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(
    "text",
    [
        'runner = "landlock"\n',
        'runner = "e2b"\n[runners.e2b]\ntemplate = "theirs"\n',
        '[runners.e2b]\ntemplate = "theirs"\n',
        '[runners.docker]\nimage = "theirs:latest"\n',
    ],
)
def test_a_project_config_may_not_choose_the_runner_or_where_it_runs(
    workspace: Path, user_dir: Path, text: str
) -> None:
    """The runner decides what is enforced (landlock cannot keep .git
    read-only, bwrap does) and a remote runner uploads the workspace to the
    template it names; images choose what the command runs in."""
    project = write(workspace / ".dsh" / "config.toml", text)
    env = env_with(user_dir)
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env)
    err = done.stderr.decode()
    assert done.returncode == 2 and f"{project}:" in err and "would weaken the sandbox" in err, err
    assert not (workspace / "ran").exists()


def test_a_project_choosing_landlock_cannot_write_the_repositorys_hooks(workspace: Path, user_dir: Path) -> None:
    """The attack: your own file accepts landlock's gaps (for when you pick it),
    bwrap would keep .git read-only, and the repository asks for landlock."""
    need_runner("bwrap")
    need_runner("landlock")
    write(user_dir / "dsh-sandbox" / "config.toml",
          'accept_degraded = ["landlock-protected-paths", "landlock-metadata"]\n')
    (workspace / ".git" / "hooks").mkdir(parents=True)
    write(workspace / ".dsh" / "config.toml", 'runner = "landlock"\n')
    done = cli("run", "--", "sh", "-c", "echo evil > .git/hooks/pre-commit", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2 and b"it chooses the runner" in done.stderr, done.stderr
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    # Your own choice of the runner is yours to make.
    mine = show(workspace, env_with(user_dir), "--runner", "landlock")
    assert mine["runner"] == ("landlock", "flag --runner")


@pytest.mark.parametrize("planted", ["file", "symlink", "other-users-dir"])
def test_the_walk_stops_at_a_git_a_run_could_have_planted(tmp_path: Path, user_dir: Path, planted: str) -> None:
    """A .git file or link in a parent (or a .git directory another user owns)
    used to make that parent the repository top, so its .dsh configured the run."""
    parent = tmp_path / "parent"
    ws = parent / "ws"
    ws.mkdir(parents=True)
    write(parent / ".dsh" / "config.toml", 'mode = "read-only"\n')
    git = parent / ".git"
    if planted == "file":
        git.write_text("gitdir: /nowhere\n")
    elif planted == "symlink":
        (tmp_path / "real-git").mkdir()
        git.symlink_to(tmp_path / "real-git")
    else:
        git.mkdir()
        os.chown(git, 65534, 65534)
    assert show(ws, env_with(user_dir))["mode"] == (None, "default")
    # A real repository of yours above the workspace still holds the project's file.
    git.unlink() if planted != "other-users-dir" else git.rmdir()
    git.mkdir()
    assert show(ws, env_with(user_dir))["mode"] == ("read-only", f"{parent / '.dsh' / 'config.toml'}:1")


def test_the_walk_does_not_enter_a_directory_anyone_can_write(tmp_path: Path, user_dir: Path) -> None:
    """A shared temp directory holding a real .git of yours is still no repository top:
    anyone (an earlier sandboxed run among them) could have made it and its .dsh."""
    shared = tmp_path / "shared"
    ws = shared / "ws"
    ws.mkdir(parents=True)
    (shared / ".git").mkdir()
    write(shared / ".dsh" / "config.toml", 'mode = "read-only"\n')
    shared.chmod(0o1777)
    assert show(ws, env_with(user_dir))["mode"] == (None, "default")
    shared.chmod(0o755)
    assert show(ws, env_with(user_dir))["mode"][0] == "read-only"


def test_a_worktree_git_file_at_the_workspace_is_its_top(workspace: Path, user_dir: Path) -> None:
    (workspace / ".git").write_text("gitdir: /elsewhere/.git/worktrees/w\n")
    write(workspace / ".dsh" / "config.toml", 'mode = "read-only"\n')
    assert show(workspace, env_with(user_dir))["mode"][0] == "read-only"


@pytest.mark.parametrize("link", [".dsh", ".dsh/config.toml"])
def test_a_linked_project_config_is_refused(workspace: Path, user_dir: Path, tmp_path: Path, link: str) -> None:
    """A .dsh (or its config.toml) that is a link could lead anywhere a run wrote."""
    elsewhere = write(tmp_path / "elsewhere" / "config.toml", 'mode = "read-only"\n')
    if link == ".dsh":
        (workspace / ".dsh").symlink_to(elsewhere.parent)
    else:
        (workspace / ".dsh").mkdir()
        (workspace / ".dsh" / "config.toml").symlink_to(elsewhere)
    done = cli("run", "--", "touch", "ran", cwd=workspace, env=env_with(user_dir))
    assert done.returncode == 2 and b"symbolic link" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()


def test_config_show_shows_a_refused_project_file_with_the_reason(workspace: Path, user_dir: Path) -> None:
    project = write(workspace / ".dsh" / "config.toml",
                    'mode = "read-only"\nrunner = "landlock"\nnetwork = true\n[env]\nLD_PRELOAD = "x.so"\n')
    env = env_with(user_dir)
    done = cli("config", "show", "--json", cwd=workspace, env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    refused = {item["key"]: item for item in data["refused"]}
    assert set(refused) == {"runner", "network", "env.LD_PRELOAD"}
    assert refused["runner"]["source"] == f"{project}:2" and "chooses the runner" in refused["runner"]["why"]
    values = {row["key"]: row for row in data["values"]}
    assert values["runner"]["value"] == "auto" and values["mode"]["value"] == "read-only"  # tightening applies
    assert "env.LD_PRELOAD" not in values
    text = cli("config", "show", cwd=workspace, env=env).stdout.decode()
    assert "refused (not applied" in text and f"runner = landlock  {project}:2" in text, text
    assert cli("run", "--", "true", cwd=workspace, env=env).returncode == 2  # a run still refuses it


def test_config_show_prints_effective_values(workspace: Path, user_dir: Path) -> None:
    """Not "mode (unset) default": what a run would use, and why."""
    text = cli("config", "show", cwd=workspace, env=env_with(user_dir)).stdout.decode()
    line = next(row for row in text.splitlines() if row.startswith("mode "))
    assert "workspace-write (default)" in line and "(unset)" not in line, text
    rows = json.loads(cli("config", "show", "--json", "--profile", "read-only", cwd=workspace,
                          env=env_with(user_dir)).stdout)["values"]
    mode = next(row for row in rows if row["key"] == "mode")
    assert mode["effective"] == "read-only" and mode["effective_because"] == "profile read-only"


def test_profile_by_name_from_your_profiles_directory(workspace: Path, user_dir: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    mine = write(user_dir / "dsh-sandbox" / "profiles" / "mytests.toml", 'extends = "read-only"\n')
    env = env_with(user_dir)
    done = cli("run", "--runner", "bwrap", "--profile", "mytests", "--", "touch", "ran", cwd=workspace, env=env)
    assert done.returncode != 0 and b"denied under read-only" in done.stderr, done.stderr
    assert not (workspace / "ran").exists()
    ok = cli("profile", "validate", "mytests", cwd=workspace, env=env)
    assert ok.returncode == 0 and str(mine).encode() in ok.stdout, ok.stderr
    # A built-in's name is not yours to shadow, nor the other way round.
    write(user_dir / "dsh-sandbox" / "profiles" / "python.toml", 'extends = "read-only"\n')
    clash = cli("run", "--profile", "python", "--", "touch", "ran", cwd=workspace, env=env)
    assert clash.returncode == 2 and b"both a built-in profile and your" in clash.stderr, clash.stderr
    listed = cli("profile", "list", cwd=workspace, env=env).stdout.decode()
    assert f"({mine})" in listed and "(not usable)" in listed, listed
    assert any(row.startswith("python ") and "workspace-write" in row for row in listed.splitlines()), listed
    # Your profiles directory where a command could write it: refused like any profile there.
    xdg = tmp_path / "xdg"
    write(xdg / "dsh-sandbox" / "profiles" / "mytests.toml", 'extends = "workspace-write"\n')
    writable = cli("run", "--profile", "mytests", "--", "touch", "ran", cwd=workspace, env=env_with(xdg))
    assert writable.returncode == 2 and b"lies inside the writable root" in writable.stderr, writable.stderr
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("home", ["flag x", "rel"])
def test_a_relative_home_is_refused_not_read_from_the_cwd(workspace: Path, home: str) -> None:
    # Relative to the cwd, a file the workspace holds would be read as the user's config.
    planted = workspace / home / ".config" / "dsh-sandbox"
    planted.mkdir(parents=True)
    (planted / "config.toml").write_text("network = true\n")
    env = {k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"}
    done = cli("run", "--", "touch", "ran", cwd=workspace, env={**env, "HOME": home})
    assert done.returncode == 2, done.stderr
    assert f"HOME={home!r} is not an absolute path" in done.stderr.decode()
    assert not (workspace / "ran").exists()
