"""Fixtures of the core tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def no_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """$TMPDIR is part of the policy; tests that want it set it themselves."""
    monkeypatch.delenv("TMPDIR", raising=False)
    yield
