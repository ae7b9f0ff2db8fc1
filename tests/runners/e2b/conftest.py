"""Fixtures: a real envd-protocol server on loopback and a runner in debug mode on it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dsh.runners.e2b import E2BRunner

from tests.support.require import require_runner, unavailable


def need_sdk() -> None:
    """The double speaks the SDK's own messages: without the SDK, skip (or fail in CI)."""
    if importlib.util.find_spec("e2b") is None:
        unavailable("e2b", "the e2b SDK is not installed; pip install 'dsh-sandbox[e2b]'")


@dataclass
class Envd:
    url: str
    root: Path
    stop: Callable[[], None]


@pytest.fixture
def envd(tmp_path: Path) -> Iterator[Envd]:
    need_sdk()
    from tests.runners.e2b.envd_server import start_envd_server

    root = tmp_path / "sandbox-root"
    root.mkdir()
    url, stop = start_envd_server(root)
    double = Envd(url, root, stop)
    yield double
    stop()


@pytest.fixture
def runner(envd: Envd) -> Iterator[E2BRunner]:
    instance = E2BRunner({"sandbox_url": envd.url, "setup_timeout": 120})
    require_runner("e2b", instance)
    yield instance
    instance.close()
