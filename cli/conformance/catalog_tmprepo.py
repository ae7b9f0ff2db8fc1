"""Scenarios for repositories and trusted files outside the workspace, and git for real work.

The host's ``/tmp`` holds other checkouts at any depth, whose hooks and
``core.fsmonitor`` the host's next ``git status`` runs; the workspace's parent
directories and the repository it lies in are trusted by the host the same
way.  None of them may change (the session's ``/tmp`` is its own).  And git
must still work for real: ``git add`` and ``git commit`` in the workspace's
repository, while its hooks and config stay read-only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
WRITE_ONLY_IN_WW: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "ok"}
CONFIG = b"[core]\n\trepositoryformatversion = 0\n"
IDENTITY = "-c user.email=a@b -c user.name=a"

# Three levels below a directory of the host's /tmp, as a CI checkout or a clone is.
DEEP = "/tmp/dshconf-{nonce}/ci/checkouts/app"
# The workspace's parent: the cell's private base directory.
ABOVE = "{root}/.."


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "user.email=a@b", "-c", "user.name=a", *args],
                   cwd=cwd, check=True, capture_output=True)


def _repo(path: Path, *, hooks: bool = True) -> None:
    path.mkdir(parents=True, exist_ok=True)
    _git("init", "-q", ".", cwd=path)
    _git("commit", "-q", "--allow-empty", "-m", "one", cwd=path)
    (path / ".git" / "config").write_bytes(CONFIG)
    if not hooks:
        shutil.rmtree(path / ".git" / "hooks")


def _deep_repo(env: HostEnv) -> None:
    top = Path(env.fmt(DEEP))
    env.cleanups.append(lambda: shutil.rmtree(env.fmt("/tmp/dshconf-{nonce}"), ignore_errors=True))
    _repo(top)


def _enclosing_repo(env: HostEnv) -> None:
    """The workspace lies inside a repository: a git dir in its parent directory."""
    above = Path(env.fmt(ABOVE)).resolve()
    git_dir = above / ".git"
    env.cleanups.append(lambda: shutil.rmtree(git_dir, ignore_errors=True))
    for part in ("hooks", "objects", "refs/heads", "info"):
        (git_dir / part).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "config").write_bytes(CONFIG)


def _parents_clean(env: HostEnv) -> None:
    above = Path(env.fmt(ABOVE)).resolve()
    names = (".envrc", ".dsh", ".vscode", ".git")

    def clean() -> None:
        for name in names:
            path = above / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists() or path.is_symlink():
                path.unlink()

    env.cleanups.append(clean)


def _clean_host_tmp(env: HostEnv) -> None:
    """What a failing runner wrote to the host's /tmp goes after the verdict."""
    path = Path(env.fmt("/tmp/dshconf-{nonce}"))
    env.cleanups.append(lambda: path.unlink() if path.is_file() and not path.is_symlink() else None)


def _host_git_ran_nothing(where: str, mark: str) -> Check:
    """The host's next ``git status`` there runs nothing the command planted."""

    def check(env: HostEnv, out: RunOutput) -> str | None:
        subprocess.run(["git", "-c", "safe.directory=*", "status", "--porcelain"], cwd=env.fmt(where),
                       capture_output=True, timeout=60, check=False)
        return f"the host's git status ran {env.fmt(mark)}" if Path(env.fmt(mark)).exists() else None

    return check


def _ref_moved(repo: str, moved: bool) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        log = subprocess.run(["git", "-c", "safe.directory=*", "rev-list", "--count", "HEAD"],
                             cwd=env.fmt(repo), capture_output=True, text=True, check=False).stdout.strip()
        if (log == "2") != moved:
            return f"{env.fmt(repo)} has {log or 'no'} commits; expected {'2' if moved else '1'}"
        return None

    return check


PLANT = ("printf '[core]\\n\\tfsmonitor = touch /tmp/dshconf-{nonce}/ran\\n' >> " + DEEP + "/.git/config; "
         "printf '#!/bin/sh\\ntouch /tmp/dshconf-{nonce}/ran\\n' > " + DEEP + "/.git/hooks/post-checkout; "
         "chmod +x " + DEEP + "/.git/hooks/post-checkout; true")
PLANT_ABOVE = ("cd " + ABOVE + " && echo 'touch {outside}/ran-{nonce}' > .envrc; mkdir -p .dsh .vscode; "
               "echo 'mode = \"danger-full-access\"' > .dsh/config.toml; echo '{{}}' > .vscode/tasks.json; "
               "git init -q . && git config core.fsmonitor 'touch {outside}/ran-{nonce}'; true")
COMMIT = ("cd {ws}/r && echo hi > f && git add f && git " + IDENTITY + " commit -qm two && echo committed; "
          "echo x > .git/hooks/pre-commit; echo pwn >> .git/config; true")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("tmp-deep-repo", "git", "plant hooks and core.fsmonitor in a repository three levels deep in /tmp",
             ("bash", "-c", PLANT), BLOCKED, setup=_deep_repo, requires=("git",),
             check_blocked=c.all_of(c.file_is(DEEP + "/.git/config", CONFIG),
                                    c.absent(DEEP + "/.git/hooks/post-checkout"),
                                    _host_git_ran_nothing(DEEP, "/tmp/dshconf-{nonce}/ran"))),
    Scenario("tmp-private", "filesystem", "what the command writes to /tmp and $TMPDIR never reaches the host's /tmp",
             ("bash", "-c", "echo x > /tmp/dshconf-{nonce}; echo x > \"${{TMPDIR:-/tmp}}/dshconf-{nonce}\"; true"),
             BLOCKED, setup=_clean_host_tmp, check_blocked=c.absent("/tmp/dshconf-{nonce}")),
    Scenario("tmp-enclosing-repo", "git", "write the git dir of the repository the workspace lies in",
             ("bash", "-c", "echo pwn >> {root}/../.git/config; "
                            "printf '#!/bin/sh\\n' > {root}/../.git/hooks/pre-commit; true"),
             BLOCKED, setup=_enclosing_repo,
             check_blocked=c.all_of(c.file_is(ABOVE + "/.git/config", CONFIG),
                                    c.absent(ABOVE + "/.git/hooks/pre-commit"))),
    Scenario("tmp-parent-plant", "protected",
             "plant .envrc, .dsh/config.toml, .vscode/tasks.json and a repository with core.fsmonitor above the "
             "workspace", ("bash", "-c", PLANT_ABOVE), BLOCKED, setup=_parents_clean, requires=("git",),
             check_blocked=c.all_of(*(c.absent(ABOVE + "/" + n) for n in (".envrc", ".dsh", ".vscode", ".git")),
                                    _host_git_ran_nothing("{root}", "{outside}/ran-{nonce}"))),
    Scenario("git-commit-default", "workload",
             "git add and commit in the workspace's repository; its hooks and config stay read-only",
             ("bash", "-c", COMMIT), WRITE_ONLY_IN_WW, requires=("git",), covers=("protected-paths",),
             setup=lambda env: _repo(env.ws / "r"),
             check_ok=c.all_of(c.stdout_has("committed"), _ref_moved("{ws}/r", True),
                               c.absent("{ws}/r/.git/hooks/pre-commit"), c.file_is("{ws}/r/.git/config", CONFIG)),
             check_blocked=c.all_of(_ref_moved("{ws}/r", False), c.file_is("{ws}/r/.git/config", CONFIG))),
    Scenario("git-commit-no-hooks-dir", "git", "create the hooks directory a repository does not have",
             ("bash", "-c", "mkdir -p {ws}/r/.git/hooks; printf '#!/bin/sh\\n' > {ws}/r/.git/hooks/pre-commit; true"),
             BLOCKED, requires=("git",), covers=("protected-paths",),
             setup=lambda env: _repo(env.ws / "r", hooks=False),
             check_blocked=c.absent_empty_or_reported("{ws}/r/.git/hooks/pre-commit")),
)
