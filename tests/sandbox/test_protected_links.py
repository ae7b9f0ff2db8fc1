"""The search for other names of protected files, with a link swapped under it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.protected_links import other_names


def test_a_link_swapped_under_the_resolution_is_a_clean_refusal(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """realpath fails with EINVAL when a link becomes a directory between its
    lstat and its readlink: an attack swapping the workspace got a traceback."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / ".git")
    assert other_names([tmp_path / "link"], [tmp_path / ".git"], [tmp_path]) == {tmp_path / ".git"}

    def swapped(path: object, *args: object, **kwargs: object) -> str:
        raise OSError(errno.EINVAL, "Invalid argument", str(path))

    monkeypatch.setattr(os.path, "realpath", swapped)
    with pytest.raises(SandboxUnavailable, match="keeps changing while it is resolved"):
        other_names([tmp_path / "link"], [tmp_path / ".git"], [tmp_path])
