"""The search for other hard links of protected files has a budget per root,
the workspace first, and a root it could not finish is named as not searched.

A run filled the sandbox HOME with junk, and made ``cfg`` a second name of a
new repository's ``.git/config`` in the workspace: one budget for every root,
spent on the HOME first, left ``cfg`` writable without a word.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.sandbox import protected_links

from tests.sandbox.test_protected_scan import make_repo, service

LIMIT = 200


def _junk(where: Path, count: int) -> None:
    """``count`` files in directories of 50 (a cache's shape)."""
    for i in range(count):
        d = where / f"d{i // 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"j{i}").touch()


def test_junk_in_the_home_leaves_the_workspace_searched(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = service(workspace)
    home = svc.resolve().home
    assert home is not None and home != workspace
    _junk(home / "junk", 3 * LIMIT)
    git = make_repo(workspace / "r")
    os.link(git / "config", workspace / "cfg")
    monkeypatch.setattr(protected_links, "_ROOTS_LIMIT", LIMIT)
    policy = svc.resolve()
    assert workspace / "cfg" in policy.protected_paths
    assert home in policy.unscanned_roots, "a root whose search ran out must be named, never taken as searched"
    assert workspace not in policy.unscanned_roots


def test_an_exhausted_workspace_search_is_incomplete(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = make_repo(workspace / "r")
    _junk(workspace / "a", 3 * LIMIT)
    (workspace / "z").mkdir()
    os.link(git / "config", workspace / "z" / "cfg")
    monkeypatch.setattr(protected_links, "_ROOTS_LIMIT", LIMIT)
    policy = service(workspace).resolve()
    assert workspace in policy.unscanned_roots
