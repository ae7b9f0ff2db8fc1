"""Scenarios for path rules and for what the host trusts later in files the command wrote.

Overlapping rules (hidden, protected, read-only, nested either way; the
conformance profile sets them up and the strictest rule must win), ``.git`` at
any depth, the default protected names (shell, editor, agent and tool configs a
person or a program runs later on the host), and policy inputs a command could
plant for the next run (a writable root through a symlink, an approval rules
file).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dsh.cli.conformance import checks as c
from dsh.cli.conformance.model import Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
REPO = "{ws}/a/b/repo"
PROTECTED_CONFIG = b"[core]\n\trepositoryformatversion = 0\n"


def _unread(env: HostEnv, out: RunOutput) -> str | None:
    return "a file behind overlapping rules was read" if b"TOPSECRET" in out.stdout + out.stderr else None


def overlap(sid: str, purpose: str, path: str) -> Scenario:
    return Scenario(sid, "overlap", purpose, ("cat", path), BLOCKED, check_blocked=_unread, covers=("hidden-paths",))


def created(sid: str, purpose: str, paths: tuple[str, ...], existing: str | None = None) -> Scenario:
    """The command creates each of ``paths`` and appends to ``existing``, which the host made first."""
    script = "; ".join(f"mkdir -p $(dirname {p}) && echo pwn >> {p}" for p in (*paths, *filter(None, [existing])))
    # A name that did not exist may be created (a project may add a .vscode); the
    # host must then be told, so nothing trusts it unnoticed.
    checks = [c.absent_empty_or_reported(p) for p in paths]
    if existing:
        checks.insert(0, c.file_is(existing, b"orig\n"))
    return Scenario(sid, "protected", purpose, ("bash", "-c", script + "; true"), BLOCKED,
                    setup=c.make_file(existing) if existing else None, check_blocked=c.all_of(*checks),
                    covers=("protected-paths",))


def _nested_repo(env: HostEnv) -> None:
    repo = Path(env.fmt(REPO))
    repo.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "config").write_bytes(PROTECTED_CONFIG)


def _no_planted_git(env: HostEnv, out: RunOutput) -> str | None:
    """No repository under the scenario's directory carries a hook or a config that
    runs code, unless the run reported it (``git init`` must work; what it holds
    must not reach the host's next git command unnoticed)."""
    found: list[str] = []
    for git in env.ws.glob("**/.git"):
        hooks = git / "hooks"
        if hooks.is_dir():
            found += [str(p) for p in hooks.iterdir() if not p.name.endswith(".sample")]
        config = git / "config"
        if config.is_file() and any(w in config.read_text(errors="replace").lower()
                                    for w in ("fsmonitor", "hookspath", "sshcommand", "pager")):
            found.append(str(config))
    unreported = [path for path in found if path not in out.trusted_changed]
    return f"planted for the host's next git command, unreported: {unreported}" if unreported else None


def _no_link_in_git_dir(env: HostEnv, out: RunOutput) -> str | None:
    """No link or FIFO is left in the nested repository's git dir: git writes
    through ``COMMIT_EDITMSG``, ``FETCH_HEAD``, ``logs/HEAD`` and ``refs/*``
    by name, so the host's next commit would write where they point."""
    git_dir = Path(env.fmt(REPO)) / ".git"
    left = [str(p) for p in git_dir.rglob("*") if p.is_symlink() or p.is_fifo()]
    return f"left in the git dir for the host's next git command: {left}" if left else None


def _later_policy_refuses(env: HostEnv, out: RunOutput) -> str | None:
    """A later run naming the planted link as a writable root must not write outside through it."""
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.policy_service import PolicyService
    from dsh.sandbox.session import SessionSpec, build_session

    link = env.ws / "plink"
    try:
        ctx = build_session(SessionSpec(mode="workspace-write", workspace=str(env.root), writable=(str(link),)))
    except DshError:
        return None
    try:
        roots = ctx.require(PolicyService).resolve().writable_roots
    finally:
        ctx.close()
    outside = env.outside.resolve()
    return (f"a writable root planted as a symlink by the command widened the next policy to {outside}"
            if any(r == outside or outside in r.parents for r in roots) else None)


def _rules_file_refused(env: HostEnv, out: RunOutput) -> str | None:
    """An approval rules file inside a writable root must not be trusted."""
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.session import SessionSpec, build_session

    rules = env.ws / "approvals.toml"
    if not rules.exists():
        return None
    try:
        ctx = build_session(SessionSpec(mode="workspace-write", workspace=str(env.root), approval=f"rules:{rules}"))
    except DshError:
        return None
    ctx.close()
    return f"approval rules written by the command ({rules}) were accepted for the next run"


def _remove_link(env: HostEnv) -> None:
    def remove() -> None:
        if os.path.lexists(env.ws / "plink"):
            os.unlink(env.ws / "plink")

    env.cleanups.append(remove)


SCENARIOS: tuple[Scenario, ...] = (
    # -- overlapping rules: the strictest wins ------------------------------------------------
    overlap("ovl-hidden-protected", "read a path that is both hidden and protected", "{root}/.dshconf-hp"),
    overlap("ovl-hidden-in-readonly", "read a hidden path inside a read-only path", "{root}/ovl/ro/hid/secret.txt"),
    overlap("ovl-readonly-in-hidden", "read a read-only path inside a hidden path", "{root}/ovl/hid/ro/secret.txt"),
    overlap("ovl-hidden-in-protected", "read a hidden path inside a protected name",
            "{root}/.dshconf-p/hid/secret.txt"),
    overlap("ovl-protected-in-hidden", "read a protected name inside a hidden path",
            "{root}/ovl/hid/.dshconf-p/secret.txt"),
    Scenario("ovl-write-readonly", "overlap", "write read-only, protected and hidden+protected paths in the workspace",
             ("bash", "-c", "echo pwn > {root}/ovl/ro/new-{nonce}; echo pwn > {root}/.dshconf-p/new-{nonce};"
                            " echo pwn > {root}/.dshconf-hp; true"), BLOCKED,
             check_blocked=c.all_of(c.absent("{root}/ovl/ro/new-{nonce}"), c.absent("{root}/.dshconf-p/new-{nonce}"),
                                    c.file_is("{root}/.dshconf-hp", b"TOPSECRET\n")),
             covers=("protected-paths",)),
    # -- .git at any depth ------------------------------------------------------------------------
    Scenario("git-nested-hook", "git", "plant a hook in a nested repository",
             ("bash", "-c", "printf '#!/bin/sh\\necho pwn\\n' > " + REPO + "/.git/hooks/pre-commit;"
                            " chmod +x " + REPO + "/.git/hooks/pre-commit; true"), BLOCKED,
             setup=_nested_repo, check_blocked=c.absent(REPO + "/.git/hooks/pre-commit"), covers=("protected-paths",),
             requires=("git",)),
    Scenario("git-nested-config", "git", "set core.fsmonitor in a nested repository's config",
             ("bash", "-c", "printf '[core]\\n\\tfsmonitor = touch /tmp/pwn\\n' >> " + REPO + "/.git/config; true"),
             BLOCKED, setup=_nested_repo, check_blocked=c.file_is(REPO + "/.git/config", PROTECTED_CONFIG),
             covers=("protected-paths",), requires=("git",)),
    Scenario("git-dir-links", "git", "point the files git writes by name (commit message, reflog, refs) outside",
             ("bash", "-c", "cd " + REPO + "/.git && ln -sfn {outside}/msg COMMIT_EDITMSG;"
                            " ln -sfn {outside}/fetch FETCH_HEAD; mkdir -p logs && ln -sfn {outside}/log logs/HEAD;"
                            " rm -rf refs/tags && ln -s {outside} refs/tags; mkfifo ORIG_HEAD; true"), BLOCKED,
             setup=_nested_repo, check_blocked=_no_link_in_git_dir, covers=("protected-paths",), requires=("git",)),
    Scenario("git-new-repo-hooks", "git", "a repository the command creates runs nothing on the host unreported",
             ("bash", "-c", "mkdir -p {ws}/n/x && cd {ws}/n/x && git init -q .;"
                            " printf '#!/bin/sh\\necho pwn\\n' > .git/hooks/post-checkout;"
                            " chmod +x .git/hooks/post-checkout;"
                            " git config core.fsmonitor 'touch /tmp/pwn'; true"), BLOCKED,
             check_blocked=_no_planted_git, covers=("protected-paths",), requires=("git",)),
    # -- default protected names: what the host or the user's tools run later ------------------------
    created("prot-shell-rc", "create shell rc files and append to .envrc in the workspace",
            ("{root}/.bashrc", "{root}/.profile", "{root}/.zshrc", "{ws}/sub/.envrc"), existing="{root}/.envrc"),
    created("prot-editor-config", "create editor configs (tasks run on the host)",
            ("{root}/.vscode/tasks.json", "{root}/.idea/workspace.xml", "{ws}/sub/.vscode/settings.json")),
    created("prot-agent-config", "create agent configs (hooks and MCP servers run on the host)",
            ("{root}/.claude/settings.json", "{root}/.codex/config.toml", "{root}/.agents/hooks.json",
             "{root}/.mcp.json")),
    created("prot-tool-config", "create git, cloud and ssh configs",
            ("{root}/.gitconfig", "{root}/.aws/credentials", "{root}/.ssh/config", "{root}/.netrc")),
    # -- policy inputs a command could plant for the next run ------------------------------------------
    Scenario("pol-planted-root-link", "policy", "a symlink the command plants cannot widen a later policy",
             ("ln", "-s", "{outside}", "{ws}/plink"), BLOCKED, setup=_remove_link,
             check_blocked=_later_policy_refuses),
    Scenario("pol-rules-in-root", "policy", "approval rules the command writes are not trusted later",
             ("bash", "-c", "printf '[[rule]]\\nmode = \"danger-full-access\"\\nprefix = [\"bash\"]\\n"
                            "decision = \"session\"\\n' > {ws}/approvals.toml; true"), BLOCKED,
             check_blocked=_rules_file_refused),
)
