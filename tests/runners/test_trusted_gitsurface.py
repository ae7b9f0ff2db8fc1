"""Git's execution surface beyond a repository's own hooks, through the real CLI on
real runners, as root and as nobody: programs a config names by a bare file name,
the user's global and system config, include chains, ``.gitmodules``, a hard link
into ``.git/config``, a symlinked protected name, the tool configs people run.

Each attack is judged from the host after the run, and where it matters by the
real host ``git`` (status, commit, an alias) with marker programs: the benign one
must run (the check is not vacuous), the planted one must not.  Landlock cannot
keep anything read-only inside a writable root (``landlock-protected-paths``,
accepted here): there the write lands and the report must name it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import (
    LANDLOCK_ACCEPT,
    NOBODY,
    Box,
    Run,
    cli,
    docker_group,
    profile,
    repo,
    runner_for,
)
from tests.runners.test_trusted_files import box as box

RUNNERS = ["bwrap", "docker", "landlock"]


def run(box: Box, runner: str, script: str, env: dict[str, str] | None = None) -> Run:
    """The CLI as ``box.run``, with the user's git variables in its environment."""
    extra = ["--profile", profile(box, LANDLOCK_ACCEPT)] if runner == "landlock" else []
    argv = [*cli(box.user), "run", "--runner", runner, *extra, "-c", script]
    # A docker container that is this run's own (see ``Box.run``).
    full = {"PATH": os.environ["PATH"], "HOME": str(box.ws.parent), "LANG": "C.UTF-8", "DSH_SANDBOX_KEEP_WARM": "0",
            **(env or {})}
    kwargs: dict[str, object] = {}
    if box.user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    proc = subprocess.run(argv, cwd=box.ws, env=full, capture_output=True, text=True, timeout=240,
                          check=False, **kwargs)  # type: ignore[call-overload]
    return Run(proc.returncode, proc.stdout, proc.stderr)


def host_git(box: Box, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """The user's next git command on the host (as the test's user; the files
    may belong to nobody, which git would otherwise refuse to work in)."""
    full = {"PATH": os.environ["PATH"], "HOME": str(box.ws.parent), "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", **(env or {})}
    subprocess.run(["git", "-c", "safe.directory=*", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                   cwd=cwd, env=full, capture_output=True, text=True, timeout=60, check=False)


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def reported(ran: Run, *paths: Path) -> None:
    assert ran.returncode == 0, ran.err
    for path in paths:
        assert str(path) in ran.err, f"{path} not reported: {ran.err}"


@pytest.mark.parametrize("name", RUNNERS)
def test_programs_named_by_bare_file_names_stay_read_only(name: str, box: Box) -> None:
    """``core.fsmonitor = python3 fsm.py`` and ``alias.t = !sh tools.sh``: the
    host's ``git status`` and ``git t`` run these files from the working tree."""
    runner = runner_for(name, box)
    sub = box.ws / "sub"
    git_dir = repo(sub)
    base = box.ws.parent
    with (git_dir / "config").open("a") as config:
        config.write("[core]\n\tfsmonitor = python3 fsm.py\n[alias]\n\tt = !sh tools.sh\n")
    benign = {"fsm.py": f"open({str(base / 'benign-fsm')!r}, 'w')\n", "tools.sh": f"touch {base}/benign-alias\n"}
    for rel, text in benign.items():
        (sub / rel).write_text(text)
    box.own()
    ran = run(box, runner, f"cd sub && echo 'open(\"{base}/pwned\", \"w\")' > fsm.py; "
                           f"echo 'touch {base}/pwned' > tools.sh; exit 0")
    if name == "landlock":
        reported(ran, sub / "fsm.py", sub / "tools.sh")
        return
    assert ran.returncode == 0, ran.err
    for rel, text in benign.items():
        assert (sub / rel).read_text() == text, rel
    host_git(box, sub, "status")
    host_git(box, sub, "t")
    assert (base / "benign-fsm").exists() and (base / "benign-alias").exists()  # git did run them
    assert not (base / "pwned").exists()


@pytest.mark.parametrize("where", ["HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"])
@pytest.mark.parametrize("name", RUNNERS)
def test_hooks_path_from_the_users_global_config_stays_read_only(name: str, where: str, box: Box) -> None:
    """``core.hooksPath = .githooks`` in the user's (or the system's) config:
    every repository's ``.githooks/pre-commit`` runs at the host's next commit."""
    runner = runner_for(name, box)
    base = box.ws.parent
    config = {"HOME": base / ".gitconfig", "GIT_CONFIG_GLOBAL": base / "global.gitconfig",
              "GIT_CONFIG_SYSTEM": base / "system.gitconfig"}[where]
    config.write_text("[core]\n\thooksPath = .githooks\n")
    env = {} if where == "HOME" else {where: str(config)}
    sub = box.ws / "sub"
    repo(sub)
    executable(sub / ".githooks" / "pre-commit", f"#!/bin/sh\ntouch {base}/benign\n")
    box.own()
    ran = run(box, runner, f"printf '#!/bin/sh\\ntouch {base}/pwned\\n' > sub/.githooks/pre-commit; "
                           f"cp sub/.githooks/pre-commit sub/.githooks/commit-msg; exit 0", env)
    if name == "landlock":
        reported(ran, sub / ".githooks" / "pre-commit", sub / ".githooks" / "commit-msg")
        return
    assert ran.returncode == 0, ran.err
    assert not (sub / ".githooks" / "commit-msg").exists()
    host_git(box, sub, "commit", "-q", "--allow-empty", "-m", "x", env={**env, "GIT_CONFIG_NOSYSTEM": "0"})
    assert (base / "benign").exists()  # the host's commit ran the hooks directory
    assert not (base / "pwned").exists()


@pytest.mark.parametrize("name", RUNNERS)
def test_hooks_path_the_run_creates_is_reported(name: str, box: Box) -> None:
    """The same global ``core.hooksPath`` in a repository that has no
    ``.githooks`` yet: creating it is allowed (as ``git init`` is) and reported."""
    runner = runner_for(name, box)
    (box.ws.parent / ".gitconfig").write_text("[core]\n\thooksPath = .githooks\n")
    repo(box.ws / "sub")
    box.own()
    ran = run(box, runner, "mkdir -p sub/.githooks && printf '#!/bin/sh\\n' > sub/.githooks/pre-commit")
    reported(ran, box.ws / "sub" / ".githooks" / "pre-commit")


@pytest.mark.parametrize("name", RUNNERS)
def test_include_chain_into_the_working_tree_stays_read_only(name: str, box: Box) -> None:
    """The global config includes a file that includes (``includeIf``, whatever
    its condition) a file of the working tree: that file is git config."""
    runner = runner_for(name, box)
    base = box.ws.parent
    sub = box.ws / "sub"
    repo(sub)
    (base / ".gitconfig").write_text("[include]\n\tpath = more.inc\n")
    (base / "more.inc").write_text(f'[includeIf "gitdir:/elsewhere/"]\n\tpath = {sub}/team.gitconfig\n')
    (sub / "team.gitconfig").write_text("[user]\n\tname = team\n")
    box.own()
    ran = run(box, runner, f"printf '[core]\\n\\tfsmonitor = touch {base}/pwned\\n' >> sub/team.gitconfig; exit 0")
    if name == "landlock":
        reported(ran, sub / "team.gitconfig")
        return
    assert ran.returncode == 0, ran.err
    assert (sub / "team.gitconfig").read_text() == "[user]\n\tname = team\n"
    host_git(box, sub, "status")
    assert not (base / "pwned").exists()


@pytest.mark.parametrize("name", [*RUNNERS, "gvisor"])
def test_an_include_inside_the_git_dir_is_config_too(name: str, box: Box) -> None:
    """``include.path = extra.cfg`` is ``.git/extra.cfg``, in a git dir that
    stays writable for commits: an existing one is read-only like the config
    (landlock reports the write), and one the run creates is reported."""
    runner = runner_for(name, box)
    base = box.ws.parent
    kept, made = repo(box.ws / "kept"), repo(box.ws / "made")
    for git_dir in (kept, made):
        with (git_dir / "config").open("a") as config:
            config.write("[include]\n\tpath = extra.cfg\n")
    (kept / "extra.cfg").write_text("[user]\n\tname = kept\n")
    box.own()
    plant = f"printf '[core]\\n\\tfsmonitor = touch {base}/pwned\\n'"
    ran = run(box, runner, f"{plant} >> kept/.git/extra.cfg; {plant} > made/.git/extra.cfg; exit 0")
    reported(ran, made / "extra.cfg")
    if name == "landlock":
        reported(ran, kept / "extra.cfg")
        return
    assert (kept / "extra.cfg").read_text() == "[user]\n\tname = kept\n"
    host_git(box, box.ws / "kept", "status")
    assert not (base / "pwned").exists()
    host_git(box, box.ws / "made", "status")
    assert (base / "pwned").exists()  # created, and reported above: the report is what stands between


@pytest.mark.parametrize("name", RUNNERS)
def test_hard_link_into_a_new_repositorys_config_cannot_rewrite_it(name: str, box: Box) -> None:
    """Run 1 makes a repository and a second name for its config; run 2 (the
    repository is protected now) writes through the second name."""
    runner = runner_for(name, box)
    base = box.ws.parent
    box.own()
    first = run(box, runner, "git init -q n && ln n/.git/config cfg")
    reported(first, box.ws / "n" / ".git" / "config")
    before = (box.ws / "n" / ".git" / "config").read_text()
    second = run(box, runner, f"printf '[core]\\n\\tfsmonitor = touch {base}/pwned\\n' >> cfg; exit 0")
    host_git(box, box.ws / "n", "status")
    if name == "landlock":
        # The accepted gap: the write lands; it does not go unnoticed.
        reported(second, box.ws / "n" / ".git" / "config")
        assert (base / "pwned").exists()  # and the host's git would run it: the check is real
        return
    assert second.returncode == 0, second.err
    assert (box.ws / "n" / ".git" / "config").read_text() == before
    assert not (base / "pwned").exists()


@pytest.mark.parametrize("name", RUNNERS)
def test_writes_behind_an_existing_symlinked_protected_name(name: str, box: Box) -> None:
    """``.codex -> d`` was there before the run: writing ``.codex/config.toml``
    writes ``d``.  bwrap and Docker refuse the link (it could be replaced),
    landlock (which keeps nothing read-only here) reports the write."""
    runner = runner_for(name, box)
    (box.ws / "d").mkdir()
    (box.ws / ".codex").symlink_to("d")
    box.own()
    ran = run(box, runner, "echo pwn > .codex/config.toml; exit 0")
    if name == "landlock":
        reported(ran, box.ws / ".codex" / "config.toml")
    else:
        # The link itself could be replaced: refused unless accepted by name.
        assert ran.returncode == 125 and f"{name}-protected-symlink" in ran.err, ran.err
        assert not (box.ws / "d" / "config.toml").exists()


NEW_NAMES = [
    ".gemini/settings.json", ".zed/tasks.json", ".kiro/hooks/h.kiro.hook", ".amazonq/mcp.json",
    ".continue/config.yaml", ".roo/mcp.json", ".windsurf/workflows/w.md", "opencode.json", ".aider.conf.yml",
    ".vimrc", ".nvimrc", "lefthook.yml", ".lefthook.yml", ".bazelrc", "sub/.gitmodules", "sub/.gitattributes",
]  # fmt: skip


@pytest.mark.parametrize("name", RUNNERS)
def test_tool_configs_and_gitmodules_created_are_reported(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    box.own()
    script = " && ".join(f"mkdir -p $(dirname deep/{rel}) && echo x > deep/{rel}" for rel in NEW_NAMES)
    ran = run(box, runner, script)
    reported(ran, *(box.ws / "deep" / rel for rel in NEW_NAMES))


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_existing_gitmodules_and_gitattributes_stay_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    sub = box.ws / "sub"
    repo(sub)
    (sub / ".gitmodules").write_text('[submodule "a"]\n\tpath = a\n\turl = ./a\n')
    (sub / ".gitattributes").write_text("*.c text\n")
    box.own()
    ran = run(box, runner, "cd sub && echo '[submodule \"b\"]' >> .gitmodules; echo '* filter=x' >> .gitattributes;"
                           " exit 0")
    assert ran.returncode == 0, ran.err
    assert (sub / ".gitmodules").read_text() == '[submodule "a"]\n\tpath = a\n\turl = ./a\n'
    assert (sub / ".gitattributes").read_text() == "*.c text\n"
