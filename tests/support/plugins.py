"""A third-party distribution for a test: one module and its ``*.dist-info``
with entry points, put first on ``sys.path`` for the test only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


def install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, entry_points: str,
    *, cache: Path | None = None,
) -> Path:
    """Write ``module.py`` and a dist-info whose ``entry_points.txt`` is ``entry_points``;
    the host's priority hint goes to a cache of the test's own (``cache``, else
    under ``tmp_path``)."""
    site = tmp_path / f"site-{module}"
    site.mkdir()
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache or tmp_path / "cache"))
    return site
