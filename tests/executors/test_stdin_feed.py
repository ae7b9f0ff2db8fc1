"""A command's stdin as a stream: bounded memory, EOF, 0 bytes and many MiB whole."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from dsh.executors.seam import ShellExecRequest, ShellExecutor
from dsh.sandbox.context import build_context
from dsh.sandbox.stdin_feed import FeedClosed, StdinFeed


def _local(workspace: Path):  # type: ignore[no-untyped-def]
    return build_context([{"id": "shell", "name": "bash-local", "config": {"cwd": str(workspace)}}])


def test_write_blocks_at_the_cap_and_times_out() -> None:
    feed = StdinFeed(max_buffered=8)
    assert feed.write(b"12345678", timeout=0.01) == 8
    assert feed.write(b"9", timeout=0.01) == 0  # nobody reads: the writer is held back
    assert feed.take(3) == b"123"
    assert feed.write(b"abcd", timeout=0.01) == 3
    feed.close()
    with pytest.raises(FeedClosed):
        feed.write(b"x")
    assert b"".join(feed.chunks()) == b"45678abc"


def test_abandoned_feed_releases_a_blocked_writer() -> None:
    feed = StdinFeed(max_buffered=4)
    feed.write(b"1234")
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            feed.write(b"more")
        except FeedClosed as exc:
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    feed.abandon()
    t.join(30)
    assert not t.is_alive() and errors


@pytest.mark.parametrize("size", [0, 1, 24 << 20])
def test_a_feed_reaches_cat_whole(workspace: Path, size: int) -> None:
    data = hashlib.sha256(b"seed").digest() * (size // 32) + b"x" * (size % 32)
    with _local(workspace) as ctx:
        shell = ctx.require(ShellExecutor)
        feed = StdinFeed(max_buffered=1 << 16)
        spec = shell.resolve(ShellExecRequest(command="cat | sha256sum", stdin=feed))
        execution = shell.execute(spec)

        def writer() -> None:
            for start in range(0, len(data), 1 << 20):
                feed.write(data[start:start + (1 << 20)])
            feed.close()

        t = threading.Thread(target=writer)
        t.start()
        result = execution.result()
        t.join(30)
    assert result.stdout.text.split()[0] == hashlib.sha256(data).hexdigest()


def test_a_command_that_closes_stdin_frees_the_writer(workspace: Path) -> None:
    with _local(workspace) as ctx:
        shell = ctx.require(ShellExecutor)
        feed = StdinFeed(max_buffered=1024)
        execution = shell.execute(shell.resolve(ShellExecRequest(command="exec 0<&-; sleep 0.2", stdin=feed)))
        with pytest.raises(FeedClosed):
            for _ in range(10_000):  # more than fits: the writer must be told, not hang
                feed.write(b"y" * 1024)
        assert execution.result().exit_code == 0


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker", "gvisor"])
def test_a_feed_left_open_does_not_hold_a_command_that_ended(workspace: Path, runner: str) -> None:
    # A caller that keeps feeding a terminal (or never closes) must not hold
    # the result of a command that has exited without reading it: the feed is
    # let go when the command ends (a feeder kept waiting held gVisor's close 10 s).
    from tests.support.sandboxed import accept_for, need_runner, sandbox_ctx

    need_runner(runner)
    with sandbox_ctx(workspace, runner=runner, accept_degraded=accept_for(runner)) as ctx:
        shell = ctx.require(ShellExecutor)
        shell.execute(shell.resolve(ShellExecRequest(command="true"))).result()  # the sandbox is warm
        feed = StdinFeed()
        result = shell.execute(shell.resolve(ShellExecRequest(command="echo done; exit 3", stdin=feed))).result()
        assert result.exit_code == 3 and result.stdout.text == "done\n", result
        with pytest.raises(FeedClosed):
            feed.write(b"late")
