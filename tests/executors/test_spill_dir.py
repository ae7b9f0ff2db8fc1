"""The spill directory: outside the writable roots, never through a link, private,
kept or removed as configured, expired by age (real filesystem, judged from the host)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.executors.capture import StreamCapture
from dsh.executors.process import LocalSubprocessService, SubprocessConfig
from dsh.executors.spill import MAX_AGE_S, SpillDir, SpillUnavailable
from dsh.sandbox.context import Context


@pytest.fixture
def place() -> Iterator[Path]:
    """A scratch directory outside /tmp (which is always a writable root)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-spill-test-", dir="/var/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(base: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(base / "home"), **extra}




def test_the_first_candidate_outside_the_roots_is_used(place: Path) -> None:
    runtime = place / "run"
    runtime.mkdir(mode=0o700)  # what the XDG spec promises: else it is ignored
    env = _env(place, XDG_RUNTIME_DIR=str(runtime))
    spill = SpillDir([place / "ws"], env)  # a root beside it: the runtime dir fits
    try:
        assert spill.path.parent == runtime / "dsh-sandbox" / "spill"
        fd, path = spill.create("stdout")
        os.write(fd, b"x")
        os.close(fd)
        info = os.stat(path)
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
        assert stat.S_IMODE(os.stat(spill.path).st_mode) == 0o700
    finally:
        spill.close(remove=True)
    # The runtime dir is a writable root: the next candidate (~/.cache) is used.
    spill = SpillDir([runtime], env)
    try:
        assert spill.path.parent == place / "home" / ".cache" / "dsh-sandbox" / "spill"
    finally:
        spill.close(remove=True)


def test_a_planted_link_is_not_followed(place: Path) -> None:
    runtime, elsewhere = place / "run", place / "elsewhere"
    runtime.mkdir(mode=0o700)
    (runtime / "dsh-sandbox").mkdir(parents=True)
    elsewhere.mkdir()
    (runtime / "dsh-sandbox" / "spill").symlink_to(elsewhere)
    env = _env(place, XDG_RUNTIME_DIR=str(runtime))
    spill = SpillDir([], env)
    try:
        assert not spill.path.is_relative_to(runtime)  # skipped, the next one is used
        assert list(elsewhere.iterdir()) == []
    finally:
        spill.close(remove=True)


def test_no_candidate_outside_the_roots_fails_closed(place: Path) -> None:
    env = _env(place)
    with pytest.raises(SpillUnavailable, match="outside the writable roots"):
        SpillDir([Path("/")], env)

    def unavailable() -> SpillDir:
        return SpillDir([Path("/")], env)

    capture = StreamCapture("stdout", max_bytes=10, max_spill_bytes=1000, spill_dir=unavailable)
    capture.feed(b"y" * 100)
    out = capture.collected()
    assert out.spill_path is None and out.spill_truncated and out.total_bytes == 100


def test_old_sessions_are_expired_by_fd(place: Path) -> None:
    runtime, victim = place / "run", place / "victim"
    runtime.mkdir(mode=0o700)
    victim.mkdir()
    (victim / "keep").write_text("x")
    base = runtime / "dsh-sandbox" / "spill"
    old, fresh = base / "session-1-old", base / "session-2-new"
    for session in (old, fresh):
        session.mkdir(parents=True)
        (session / "stdout-a.log").write_text("x")
    (old / "link").symlink_to(victim)
    stale = time.time() - MAX_AGE_S - 60
    os.utime(old, (stale, stale))
    spill = SpillDir([], _env(place, XDG_RUNTIME_DIR=str(runtime)))
    spill.close(remove=True)
    assert not old.exists() and fresh.exists() and not spill.path.exists()
    assert (victim / "keep").read_text() == "x"  # the link was removed, not followed


def test_a_session_that_keeps_its_spill_files(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(place))
    ctx = Context()
    service = LocalSubprocessService(ctx, SubprocessConfig(keep_spill_files=True))
    capture = service.capture("stdout", max_bytes=10, max_spill_bytes=1000)
    capture.feed(b"z" * 100)
    capture.finish()
    assert capture.read_spill(90, 100) == b"z" * 10  # read back by fd
    path = capture.spill_path
    assert path is not None and path.startswith(str(place / "dsh-sandbox" / "spill") + "/")
    service.close()
    assert Path(path).read_bytes() == b"z" * 100  # still there for the person it was shown to


def test_the_oldest_sessions_go_beyond_the_size_cap(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dsh.executors.spill as spill_module

    monkeypatch.setattr(spill_module, "MAX_TOTAL_BYTES", 250)
    runtime, victim = place / "run", place / "victim"
    runtime.mkdir(mode=0o700)
    victim.mkdir()
    (victim / "big").write_bytes(b"v" * 10_000)  # behind a link: never counted or removed
    base = runtime / "dsh-sandbox" / "spill"
    now = time.time()
    sessions = [base / f"session-{i}" for i in range(4)]
    for age, session in zip((400, 300, 200, 100), sessions, strict=True):
        session.mkdir(parents=True)
        (session / "stdout-a.log").write_bytes(b"x" * 100)
        (session / "link").symlink_to(victim)
        os.utime(session, (now - age, now - age))
    spill = SpillDir([], _env(place, XDG_RUNTIME_DIR=str(runtime)))
    spill.close(remove=True)
    # 400 bytes kept by four sessions, cap 250: the two oldest go, the newest stay.
    assert [s.exists() for s in sessions] == [False, False, True, True]
    assert (victim / "big").stat().st_size == 10_000
