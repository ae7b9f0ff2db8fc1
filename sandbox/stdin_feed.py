"""``StdinFeed``: a command's stdin as a stream, in bounded memory.

A writer (the CLI copying its own stdin, a terminal session typing) pushes
bytes; whoever drives the process (the pump for a local process, a runner's
feeder thread for a remote one) takes them as the command's stdin is ready.
At most ``max_buffered`` bytes wait in memory: past that ``write`` blocks (or
times out), so neither a 100 MiB pipe nor a program that never reads makes
the host hold more.  ``close()`` is EOF once what is buffered has been taken.
Thread-safe; plain library (no context).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

DEFAULT_MAX_BUFFERED = 1 << 20


class FeedClosed(Exception):
    """``write`` after ``close()``, or the reader went away."""


class StdinFeed:
    def __init__(self, max_buffered: int = DEFAULT_MAX_BUFFERED) -> None:
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be at least 1, got {max_buffered}")
        self.max_buffered = max_buffered
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._closed = False  # no more writes: EOF after the buffer drains
        self._gone = False  # the reader will take nothing more
        self._cond = threading.Condition()
        self._wakers: list[Callable[[], None]] = []

    # -- writer side ----------------------------------------------------------------
    def write(self, data: bytes, timeout: float | None = None) -> int:
        """Queue ``data``; block while the buffer is full.  Returns how many
        bytes were queued (fewer only when ``timeout`` ran out)."""
        view = memoryview(bytes(data))
        done = 0
        end = None if timeout is None else time.monotonic() + timeout
        while done < len(view):
            with self._cond:
                while self._size >= self.max_buffered and not self._gone and not self._closed:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return done
                    self._cond.wait(left)
                if self._gone or self._closed:
                    raise FeedClosed("the command's stdin is closed")
                room = self.max_buffered - self._size
                part = bytes(view[done:done + room])
                self._chunks.append(part)
                self._size += len(part)
                done += len(part)
                self._cond.notify_all()
                wakers = list(self._wakers)
            for wake in wakers:
                wake()
        return done

    def close(self) -> None:
        """EOF for the command once the buffered bytes are taken."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def gone(self) -> bool:
        """The reader stopped taking input (the command's stdin is closed)."""
        return self._gone

    # -- reader side ----------------------------------------------------------------
    def on_data(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` (from the writer's thread) when data or EOF arrives."""
        with self._cond:
            self._wakers.append(wake)

    def pending(self) -> bool:
        with self._cond:
            return bool(self._chunks)

    def eof(self) -> bool:
        """Closed and drained: the reader should close the command's stdin."""
        with self._cond:
            return self._closed and not self._chunks

    def take(self, limit: int) -> bytes:
        """Up to ``limit`` buffered bytes, without blocking (``b""``: none now)."""
        with self._cond:
            out = bytearray()
            while self._chunks and len(out) < limit:
                chunk = self._chunks.popleft()
                room = limit - len(out)
                if len(chunk) > room:
                    self._chunks.appendleft(chunk[room:])
                    chunk = chunk[:room]
                out += chunk
            self._size -= len(out)
            self._cond.notify_all()
            return bytes(out)

    def unread(self, data: bytes) -> None:
        """Give back the part of a ``take`` the command did not accept yet."""
        if not data:
            return
        with self._cond:
            self._chunks.appendleft(data)
            self._size += len(data)

    def chunks(self, size: int = 1 << 16) -> Iterator[bytes]:
        """Blocking iterator for a feeder thread; ends at EOF."""
        while True:
            with self._cond:
                while not self._chunks and not self._closed and not self._gone:
                    self._cond.wait()
                if self._gone or (self._closed and not self._chunks):
                    return
            data = self.take(size)
            if data:
                yield data

    def abandon(self) -> None:
        """The reader is done (the command closed stdin or ended): writers stop."""
        with self._cond:
            self._gone = True
            self._chunks.clear()
            self._size = 0
            self._cond.notify_all()
