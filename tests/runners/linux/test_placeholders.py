"""Placeholders of missing protected paths, made from the pinned parent's fd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.linux.placeholders import Placeholder
from dsh.sandbox.mount_facts import PLACEHOLDER_MODE, is_placeholder


def test_a_placeholder_gets_its_mode_through_its_own_fd_whatever_the_umask(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode is set on the directory opened without following a link, not
    by name: a link swapped in after the mkdir must not have its target chmod'ed."""
    chmods: list[object] = []
    real_chmod = os.chmod
    monkeypatch.setattr(os, "chmod", lambda *a, **k: (chmods.append(a), real_chmod(*a, **k))[1])
    parent = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    old = os.umask(0o077)
    try:
        held = Placeholder.acquire(str(tmp_path / ".dsh"), parent)
    finally:
        os.umask(old)
        os.close(parent)
    assert held is not None
    try:
        assert (tmp_path / ".dsh").stat().st_mode & 0o7777 == PLACEHOLDER_MODE
        assert is_placeholder(str(tmp_path / ".dsh"))
        assert chmods == [], "chmod by name"
    finally:
        held.release()
    assert not (tmp_path / ".dsh").exists()
