"""The snapshot a mount plan is made from, on the live filesystem: each
path's canonical form (built on its parent's) is what ``realpath`` says, and
a directory is listed only where one mask over it can pay."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_facts import gather_facts
from dsh.sandbox.policy import SandboxPolicy


def test_canonical_forms_agree_with_realpath_through_links_and_missing_tails(tmp_path: Path) -> None:
    base = Path(os.path.realpath(tmp_path))
    ws = base / "ws"
    (ws / "real" / "deep").mkdir(parents=True)
    (base / "elsewhere" / "x").mkdir(parents=True)
    os.symlink("real", ws / "rel")  # relative
    os.symlink(base / "elsewhere", ws / "abs")
    os.symlink(ws / "rel", ws / "chain")  # a link to a link
    os.symlink(ws / "nowhere", ws / "dangling")
    named = [ws / "rel" / "deep" / ".git", ws / "abs" / "x" / ".dsh", ws / "chain" / "deep", ws / "dangling" / "y",
             ws / "missing" / "a" / "b", ws / "real" / "deep"]
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                           protected_paths=tuple(named))
    facts = gather_facts(policy, os.geteuid())
    for path in named:
        assert facts.of(str(path)).real == os.path.realpath(path), path
    assert facts.of(str(ws / "rel")).kind == "symlink" and facts.of(str(ws / "missing" / "a")).kind == "missing"


def test_only_a_directory_one_mask_can_serve_is_listed(trusted_dir: Path, tmp_path: Path) -> None:
    base = trusted_dir  # not under /tmp, which a private /tmp replaces
    ws, many, few = base / "ws", base / "many", base / "few"
    for d in (ws, *(many / f"h{i}" for i in range(3)), many / "other", *(few / f"o{i}" for i in range(4)),
              few / "h0"):
        d.mkdir(parents=True)
    hidden = (*(many / f"h{i}" for i in range(3)), few / "h0", ws / "inside")
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                           hidden_paths=hidden)
    facts = gather_facts(policy, os.geteuid())
    assert str(many) in facts.listings and sorted(facts.listings[str(many)]) == ["h0", "h1", "h2", "other"]
    assert facts.of(str(many / "other")).kind == "dir"
    assert str(few) not in facts.listings  # four entries to show again for one hidden
    assert str(ws) not in facts.listings  # inside a root: new entries there are the command's
    in_tmp = Path(os.path.realpath(tmp_path))  # under /tmp, which a private /tmp replaces: never
    for i in range(3):
        (in_tmp / f"h{i}").mkdir()
    under_tmp = SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=ws,
                              hidden_paths=tuple(in_tmp / f"h{i}" for i in range(3)))
    assert str(in_tmp) not in gather_facts(under_tmp, os.geteuid()).listings
