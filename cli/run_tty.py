"""``run -t``: the command on a pty inside the sandbox, attached to this terminal.

The terminal relay allocates the pty inside the sandbox; this side puts our
own terminal in raw mode and copies keystrokes to it as frames (Ctrl-C is a
byte the sandbox's line discipline turns into SIGINT for its foreground
program), passes window-size changes on (SIGWINCH), and writes what the
program prints through ``HostTerminalFilter``.  The terminal is restored, and
modes a program left on are reset, whatever happens.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from dsh.cli.tty_filter import RESET, HostTerminalFilter
from dsh.sandbox.terminal_text import printable

_POLL_S = 0.02


def terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
        return max(1, min(size.lines, 1000)), max(1, min(size.columns, 1000))
    except OSError:
        return 24, 80


def attach(execution: Any, feed: Any) -> None:
    """Drive ``execution`` (started with ``terminal`` and ``feed`` as stdin) until it ends."""
    import termios
    import tty

    from dsh.executors.pty_launch import StatusParser, data_frames, resize_frame
    from dsh.sandbox.stdin_feed import FeedClosed

    fd_in = sys.stdin.fileno()
    saved = termios.tcgetattr(fd_in)
    resized = threading.Event()
    previous = signal.signal(signal.SIGWINCH, lambda *_: resized.set())
    stop = threading.Event()

    def keys() -> None:
        import select

        while not stop.is_set():
            ready, _, _ = select.select([fd_in], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(fd_in, 4096)
                if not chunk:
                    feed.close()
                    return
                feed.write(data_frames(chunk))
            except (OSError, FeedClosed):
                return

    filt = HostTerminalFilter()
    status = StatusParser()
    out = err = 0
    reader = threading.Thread(target=keys, name="dsh-tty-keys", daemon=True)
    try:
        tty.setraw(fd_in)
        reader.start()
        while True:
            if resized.is_set():
                resized.clear()
                try:
                    feed.write(resize_frame(*terminal_size()), timeout=1)
                except FeedClosed:
                    pass
            done = execution.wait(0)
            data, out = execution.observed.read("stdout", out)
            if data:
                os.write(sys.stdout.fileno(), filt(data))
            text, err = execution.observed.read("stderr", err)
            if text:
                status.feed(text)
                if status.other:
                    # The relay's own words, but the program can write there too
                    # (``/proc/$PPID/fd/2``): shown escaped, never acted on.
                    shown = printable(bytes(status.other).decode("utf-8", "replace"), keep="\n")
                    os.write(sys.stderr.fileno(), shown.replace("\n", "\r\n").encode())
                    status.other.clear()
            if done:
                return
            if not data:
                execution.wait(_POLL_S)
    finally:
        stop.set()
        termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous)
        os.write(sys.stdout.fileno(), RESET)


_stdin_taken = False


def piped_stdin() -> Any:
    """This process's stdin as a ``StdinFeed`` for the command, when it is a pipe or
    a file (not a terminal): copied by a thread in bounded memory, EOF passed on.
    Only the first run of an invocation gets it (a stream cannot be replayed)."""
    global _stdin_taken
    if _stdin_taken:
        return None
    try:
        if os.isatty(0):
            return None
        os.fstat(0)
    except OSError:
        return None  # no stdin at all
    _stdin_taken = True
    import threading

    from dsh.sandbox.stdin_feed import FeedClosed, StdinFeed

    feed = StdinFeed()

    def copy() -> None:
        try:
            while True:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    break
                feed.write(chunk)
        except (OSError, FeedClosed):
            return  # the command closed its stdin, or ours broke: it sees EOF
        feed.close()

    threading.Thread(target=copy, name="dsh-stdin", daemon=True).start()
    return feed
