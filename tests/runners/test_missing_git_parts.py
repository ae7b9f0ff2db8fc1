"""Missing control parts of an existing repository, and a missing hooks
directory a host-wide config names, cannot be created (bwrap, docker).

A repository without ``info``, ``modules``, ``worktrees``, ``remotes``,
``branches`` (a minimal clone, a cleaned-up git dir): a command that creates
them adds attributes (filter drivers), nested repositories and remotes the
host trusts.  A global ``core.hooksPath = <ws>/hooks`` whose directory does not
exist yet: a command that creates ``hooks/pre-commit`` runs at the host's next
commit in any repository.  Each must stay uncreatable (an empty read-only
placeholder during the run, nothing left after it), and git must still work
in the sandbox.  The host's real ``git commit`` checks the hooks directory
(``HOME`` is the test's private directory).  Root and nobody.
"""

from __future__ import annotations

import shutil

import pytest

from tests.runners.test_trusted_files import Box, repo, runner_for
from tests.runners.test_trusted_files import box as box
from tests.runners.test_trusted_gitsurface import host_git, run

PARTS = ("info", "modules", "worktrees", "remotes", "branches")


@pytest.mark.parametrize("name", ["bwrap", "docker"])
def test_missing_control_parts_and_hooks_path_cannot_be_created(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    base = box.ws.parent
    (base / ".gitconfig").write_text(f"[core]\n\thooksPath = {box.ws}/hooks\n")
    sub = box.ws / "sub"
    git_dir = repo(sub)
    for part in PARTS:
        shutil.rmtree(git_dir / part, ignore_errors=True)
    box.own()
    plant = " ".join(f"mkdir -p sub/.git/{p}/x && echo pwn > sub/.git/{p}/x/f;" for p in PARTS)
    ran = run(box, runner, f"{plant} mkdir -p hooks; printf '#!/bin/sh\\ntouch {base}/pwned\\n' > hooks/pre-commit; "
                           "chmod +x hooks/pre-commit; cd sub && git status --short >/dev/null && echo git-ok; exit 0")
    assert ran.returncode == 0, ran.err
    assert "git-ok" in ran.out, f"git no longer works in the sandbox: {ran.err}"
    host_git(box, sub, "commit", "-q", "--allow-empty", "-m", "x")
    assert not (base / "pwned").exists(), "the host's commit ran a hook the command planted"
    created = [p for p in (*PARTS, ) if (git_dir / p).exists()]
    assert created == [], f"control parts the command created: {created}"
    assert not (box.ws / "hooks").exists()
