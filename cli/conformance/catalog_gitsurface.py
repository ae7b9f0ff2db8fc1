"""Scenarios for git's execution surface beyond a repository's hooks.

Programs a repository's config (or a file it includes) names by a bare file
name, ``.gitmodules`` and ``.gitattributes``, a second hard link to
``.git/config`` made before the run, and the tool configs people run today.
The user's global and system config are host environment the harness does not
change; their tests run the CLI with it (``tests/runners/test_trusted_gitsurface.py``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.catalog_policy import created
from dsh.cli.conformance.model import Expect, HostEnv, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
REPO = "{ws}/gs"
FSM = b"import sys\n"
TOOLS = b"true\n"
TEAM = b"[alias]\n\tt = !sh tools.sh\n"
MODULES = b'[submodule "a"]\n\tpath = a\n\turl = ./a\n'
ATTRIBUTES = b"*.c text\n"


def _repo(env: HostEnv) -> Path:
    repo = Path(env.fmt(REPO))
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    return repo


def _bare_names(env: HostEnv) -> None:
    """fsmonitor and an alias naming working-tree files by bare name, one of
    them through an included config file of the working tree."""
    repo = _repo(env)
    with (repo / ".git" / "config").open("a") as config:
        config.write("[core]\n\tfsmonitor = python3 fsm.py\n[include]\n\tpath = ../team.gitconfig\n")
    (repo / "fsm.py").write_bytes(FSM)
    (repo / "tools.sh").write_bytes(TOOLS)
    (repo / "team.gitconfig").write_bytes(TEAM)


def _hard_link(env: HostEnv) -> None:
    """What an earlier run left: a repository and a second name of its config."""
    repo = _repo(env)
    (repo / ".git" / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n")
    link = env.ws / "cfg"
    if os.path.lexists(link):
        link.unlink()
    os.link(repo / ".git" / "config", link)


def _git_files(env: HostEnv) -> None:
    repo = _repo(env)
    (repo / ".gitmodules").write_bytes(MODULES)
    (repo / ".gitattributes").write_bytes(ATTRIBUTES)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("git-bare-name-program", "git",
             "rewrite programs git config names by bare file name (fsmonitor = python3 fsm.py, an included "
             "alias = !sh tools.sh) and the included config file",
             ("bash", "-c", "cd " + REPO + " && echo 'open(\"/tmp/pwn\", \"w\")' > fsm.py;"
                            " echo 'touch /tmp/pwn' > tools.sh; echo '[core]' >> team.gitconfig; true"),
             BLOCKED, setup=_bare_names, covers=("protected-paths",), requires=("git",),
             check_blocked=c.all_of(c.file_is(REPO + "/fsm.py", FSM), c.file_is(REPO + "/tools.sh", TOOLS),
                                    c.file_is(REPO + "/team.gitconfig", TEAM))),
    Scenario("git-hardlink-config", "git", "write a repository's config through a hard link an earlier run made",
             ("bash", "-c", "printf '[core]\\n\\tfsmonitor = touch /tmp/pwn\\n' >> {ws}/cfg; true"), BLOCKED,
             setup=_hard_link, covers=("protected-paths",), requires=("git",),
             check_blocked=c.file_is(REPO + "/.git/config", b"[core]\n\trepositoryformatversion = 0\n")),
    Scenario("git-modules-attributes", "git", "rewrite .gitmodules and .gitattributes (submodule URLs, filter drivers)",
             ("bash", "-c", "cd " + REPO + " && echo '[submodule \"b\"]' >> .gitmodules;"
                            " echo '* filter=x' >> .gitattributes; true"),
             BLOCKED, setup=_git_files, covers=("protected-paths",), requires=("git",),
             check_blocked=c.all_of(c.file_is(REPO + "/.gitmodules", MODULES),
                                    c.file_is(REPO + "/.gitattributes", ATTRIBUTES))),
    created("prot-tool-config-more", "create the configs of more agents, editors and hook managers",
            ("{root}/.gemini/settings.json", "{root}/.zed/tasks.json", "{root}/.kiro/hooks/h.kiro.hook",
             "{root}/.amazonq/mcp.json", "{root}/.continue/config.yaml", "{root}/.roo/mcp.json",
             "{root}/.windsurf/workflows/w.md", "{root}/opencode.json", "{root}/.aider.conf.yml",
             "{root}/.vimrc", "{root}/.nvimrc", "{root}/lefthook.yml", "{root}/.lefthook.yml",
             "{root}/.bazelrc", "{ws}/sub/.gitmodules", "{ws}/sub/.gitattributes")),
)
