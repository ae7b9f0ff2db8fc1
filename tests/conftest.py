"""Fixtures every test may use; what a test needs from the host is in
``tests.support.require``."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# A suite started as a background job of a non-interactive shell (`cmd &`,
# as some CI launchers do) inherits SIGINT ignored, and so would every CLI it
# starts: the tests of Ctrl-C then see nothing.  The CLI keeps an ignored
# SIGINT, as any Unix program does; its tests run it as a terminal would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP under `nohup`: the CLI keeps it ignored (what nohup asks for),
# so its hang-up tests need it at its default.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(autouse=True, scope="session")
def _sandbox_homes_in_a_temp_dir() -> Iterator[None]:
    """Every policy makes a per-workspace sandbox HOME under $XDG_CACHE_HOME: the
    test workspaces' homes go to a scratch directory, not the tester's ~/.cache.
    Outside /tmp: dsh-sandbox's own state may not lie in a writable root."""
    saved = os.environ.get("XDG_CACHE_HOME")
    scratch = Path(tempfile.mkdtemp(prefix="dsh-xdg-cache-", dir="/var/tmp")).resolve()
    os.environ["XDG_CACHE_HOME"] = str(scratch)
    yield
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _sessions_closed() -> Iterator[None]:
    """Close each session a test opened and left open.  A session holds fds
    (its policy paths' pins, its private /tmp's lock, a runner's filter) until
    it is closed; a suite of thousands of tests that each left one open ran
    out of descriptors under a login session's default limit of 1024 (every
    test after that failed with EMFILE)."""
    from dsh.sandbox.context import Context
    from dsh.sandbox.policy_service import PolicyService

    opened: list[weakref.ref[Any]] = []
    originals = {cls: cls.__init__ for cls in (Context, PolicyService)}

    def tracking(cls: type[Any]) -> Callable[..., None]:
        def tracked(self: Any, *args: Any, **kwargs: Any) -> None:
            originals[cls](self, *args, **kwargs)
            opened.append(weakref.ref(self))
        return tracked

    for cls in originals:
        cls.__init__ = tracking(cls)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for cls, init in originals.items():
            cls.__init__ = init  # type: ignore[method-assign]
        for ref in reversed(opened):  # a service before the context it came from
            left = ref()
            if left is not None:
                left.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """A canonical, empty workspace directory."""
    ws = (tmp_path / "ws").resolve()
    ws.mkdir()
    yield ws


@pytest.fixture
def trusted_dir() -> Iterator[Path]:
    """A directory outside every default writable root (not under /tmp or
    $TMPDIR): where a profile, rules file or fake $HOME must live to be trusted."""
    path = Path(tempfile.mkdtemp(prefix="dsh-test-", dir="/var/tmp")).resolve()
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many descriptors the test process holds at the end: a login session
    allows 1,024, and a leak of one per test ran a whole suite out of them."""
    import resource

    try:
        held = len(os.listdir("/proc/self/fd"))
    except OSError:
        return
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    terminalreporter.write_line(f"descriptors held by the test process at the end: {held} (soft limit {soft})")
