"""The git repository a workspace lies in, strictly above it.

A workspace is often a subdirectory of a checkout (a package of a monorepo, a
CI job's working directory).  Git run in the workspace, or by the host in any
directory of that checkout, takes that repository's hooks and config, so its
git dir stays read-only on every runner, wherever it lies: outside every
writable root it is read-only already, and inside one (an explicit root that
contains the workspace, the shared ``/tmp``) the whole git dir is protected,
whatever the profile's ``git`` says (the workspace's own commits go to its own
repository).  Runners that hide the host (a private ``/tmp``, a container)
show its work tree read-only so git still finds it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.git_config import programs_named_in_config
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.policy import SandboxPolicy
from dsh.sandbox.policy_paths import canonical, git_dirs, is_within, read_small_file
from dsh.sandbox.protected_scan import protected_in_repo


@dataclass(frozen=True)
class EnclosingRepository:
    top: Path  # the work tree, or a bare git dir the workspace lies in
    dot_git: Path  # its ``.git`` entry (``top`` itself when bare)
    git_dirs: tuple[Path, ...]  # the git dir(s) behind it (a ``.git`` file's target, the common dir)

    @property
    def bare(self) -> bool:
        return self.dot_git == self.top

    def paths(self) -> tuple[Path, ...]:
        """The work tree's top and every git dir outside it that points back
        to it (``vouched_git_dirs``): what a runner that hides the host shows."""
        return (self.top, *vouched_git_dirs(self.dot_git, self.top))


def vouched_git_dirs(dot_git: Path, top: Path) -> list[Path]:
    """The git dirs outside ``top`` that its ``.git`` file leads to and that
    point back to it, as git itself records them.

    A ``.git`` file (``gitdir: <path>``) is written by whoever could write the
    work tree, a sandboxed run among them; a runner that hides the host must
    not show what such a file names (``gitdir: /root``).  So a git dir counts
    only when it names this ``.git`` in return, where a run could not have
    written it: a worktree's ``<git dir>/gitdir`` holds the ``.git`` file's
    path; a submodule's ``<git dir>/config`` sets ``core.worktree`` to its work
    tree; and a worktree's common dir is the directory two levels above its
    git dir (``<common>/worktrees/<name>``).  A symlinked ``.git`` leads
    nowhere here: nothing in the target names the link."""
    if os.path.islink(dot_git) or not os.path.isfile(dot_git):
        return []
    found = git_dirs(dot_git)
    if not found:
        return []
    first, common = found[0], found[1:]
    vouched = [c for c in common if first.parent.name == "worktrees" and first.parent.parent == c]
    if not is_within(first, top):
        me = canonical(dot_git)
        back = (read_small_file(first / "gitdir") or "").strip()
        worktree = _core_worktree(first)
        if not ((back and canonical(back.splitlines()[0], first) == me)
                or (worktree is not None and canonical(worktree, first) == me.parent)):
            return []
        vouched.insert(0, first)
    return [d for d in vouched if not is_within(d, top)]


def _core_worktree(git_dir: Path) -> str | None:
    """``core.worktree`` of a git dir's own config (the simple form git writes for a submodule)."""
    section = ""
    for raw in (read_small_file(git_dir / "config") or "").splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip().lower()
        elif section == "core" and "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            if key.lower() == "worktree" and value:
                return value.strip('"')
    return None


def _looks_bare(path: Path) -> bool:
    """Git's test for a git dir (HEAD with objects and refs, or a commondir)."""
    if not os.path.isfile(path / "HEAD"):
        return False
    return (path / "commondir").is_file() or ((path / "objects").is_dir() and (path / "refs").is_dir())


def enclosing_repository(workspace: Path) -> EnclosingRepository | None:
    """The nearest repository strictly above ``workspace`` (canonical), as git finds it."""
    for top in workspace.parents:
        dot_git = top / ".git"
        if os.path.lexists(dot_git):
            if os.path.isdir(dot_git) and not os.path.islink(dot_git):
                return EnclosingRepository(top, dot_git, (dot_git,))
            targets = ([canonical(dot_git)] if os.path.isdir(dot_git) else []) + git_dirs(dot_git)
            return EnclosingRepository(top, dot_git, tuple(dict.fromkeys(targets)))
        if _looks_bare(top):
            return EnclosingRepository(top, top, (top,))
    return None


def kept_read_only(repo: EnclosingRepository, roots: Sequence[Path]) -> set[Path]:
    """What of ``repo`` lies in a writable root and must be kept read-only there.

    The whole git dir, but for a bare git dir the workspace lies in (it cannot
    be read-only without the workspace): its control parts, as for any git dir
    that holds a root.
    """
    wanted = protected_in_repo(repo.dot_git, "commit" if repo.bare else "read-only")
    if not repo.bare:
        wanted |= set(repo.git_dirs)
    return {p for p in wanted if any(is_within(p, r) for r in roots)}


def named_by_config(repo: EnclosingRepository, roots: Sequence[Path]) -> set[Path]:
    """What the repository's config (and the host-wide ones) makes git run or
    read inside ``roots``, existing or not.

    The host's next ``git status`` anywhere in the checkout runs
    ``core.fsmonitor = ws/tools/fsm.sh``, hooks from ``core.hooksPath = ws/hooks``,
    ``alias.t = !sh ws/tools/t.sh``: files in the workspace the command could
    write.  Missing ones are named too (the runner makes them uncreatable);
    a value naming a root itself (or an ancestor) is left out, as for any
    repository: it must not make a root read-only.
    """
    if not roots:
        return set()
    named = programs_named_in_config(repo.dot_git, repo.git_dirs, roots, missing=True)
    return {p for p in named if not any(r == p or r.is_relative_to(p) for r in roots)}


def describe_enclosing(policy: SandboxPolicy) -> list[str]:
    """What holds for the repository the workspace lies in, exactly."""
    repo = enclosing_repository(policy.workspace)
    if repo is None:
        return []
    kept = set(policy.protected_paths)
    lines = [f"enclosing repository: {repo.top}" + (" (bare)" if repo.bare else "")]
    for git_dir in dict.fromkeys((repo.dot_git, *repo.git_dirs)):
        root = next((r for r in policy.writable_roots if is_within(git_dir, r)), None)
        if policy.mode is not SandboxMode.WORKSPACE_WRITE or root is None:
            lines.append(f"  {git_dir}: read-only (outside every writable root)")
        elif repo.bare and git_dir == repo.top:
            lines.append(f"  {git_dir}: its hooks, config and other control parts kept read-only "
                         f"(the workspace lies inside it, in writable root {root})")
        elif git_dir in kept:
            lines.append(f"  {git_dir}: kept read-only inside writable root {root}")
        else:
            lines.append(f"  {git_dir}: WRITABLE inside writable root {root}")
    return lines
