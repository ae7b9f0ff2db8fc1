"""Fixtures the runner tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.net_probe import HOST


@pytest.fixture
def probe_host() -> Iterator[dict[str, Any]]:
    """``HOST`` run in the test's own process (a runner driven in-process, as
    root): its names, ``PROBE``, ``port`` and ``resolver`` among them."""
    names: dict[str, Any] = {}
    exec(HOST, names)
    try:
        yield names
    finally:
        names["server"].shutdown()
