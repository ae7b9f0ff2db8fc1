"""Stream capture for the subprocess service: bounded memory plus a private spill file.

Each stream keeps its newest ``max_bytes`` in memory (a tail ``TextRetainer``,
which is also the window the offset readers see).  The spill file is opened
lazily, the first time the stream outgrows memory: until then nothing was
dropped, so the window still holds every byte and is written out first.  A
short command therefore never touches the disk.  The file is read back only
through the fd made with it (``read_spill``), never reopened by path: what is
at that path later is not trusted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from dsh.executors.retention import TextRetainer
from dsh.executors.seam import CollectedOutput
from dsh.executors.spill import SpillDir


class StreamCapture:
    """One stream (stdout or stderr) of one process.  Thread-safe."""

    def __init__(
        self,
        name: str,
        *,
        max_bytes: int,
        max_spill_bytes: int,
        spill_dir: Callable[[], SpillDir] | None = None,
    ) -> None:
        self.name = name
        self.max_spill_bytes = max_spill_bytes
        self._retainer = TextRetainer(max_bytes, "tail")
        self._spill_dir = spill_dir
        self._spill_fd: int | None = None
        self._spill_path: str | None = None
        self._spill_written = 0
        self._spill_truncated = False
        self._spill_error: str | None = None
        self._lock = threading.Lock()
        self._finished = False

    # -- writer side (the pump thread) -----------------------------------------
    def feed(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._spill_fd is None and self._spill_path is None and self._spill_error is None:
                if self._retainer.total_bytes + len(data) > self._retainer.max_bytes:
                    self._open_spill()
            if self._spill_fd is not None and not self._finished:
                self._spill(data)
            self._retainer.feed(data)

    def note(self, text: str) -> None:
        """Append a note of our own (``spawn failed: ...``) to the stream."""
        self.feed(text.encode("utf-8", errors="replace"))

    def finish(self) -> None:
        """EOF: nothing more is written (the fd stays open for ``read_spill``)."""
        with self._lock:
            self._finished = True

    def release(self) -> None:
        """Close the spill fd (the file itself stays for the caller)."""
        with self._lock:
            fd, self._spill_fd = self._spill_fd, None
            self._finished = True
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        fd = getattr(self, "_spill_fd", None)
        if fd is not None:
            os.close(fd)

    def _open_spill(self) -> None:
        if self._spill_dir is None or self.max_spill_bytes <= 0:
            self._spill_truncated = self.max_spill_bytes <= 0
            self._spill_error = "no spill"
            return
        try:
            self._spill_fd, path = self._spill_dir().create(self.name)
        except OSError as exc:
            # No spill file: the in-memory tail is still returned, marked cut.
            self._spill_error = str(exc)
            self._spill_truncated = True
            return
        self._spill_path = path
        _, held = self._retainer.window()  # everything so far: nothing was dropped yet
        self._spill(held)

    def _spill(self, data: bytes) -> None:
        assert self._spill_fd is not None
        room = self.max_spill_bytes - self._spill_written
        if room <= 0:
            self._spill_truncated = True
            return
        chunk = memoryview(data)[:room]
        if len(chunk) < len(data):
            self._spill_truncated = True
        try:
            while len(chunk):
                n = os.write(self._spill_fd, chunk)
                self._spill_written += n
                chunk = chunk[n:]
        except OSError as exc:  # disk full: keep the tail in memory, report truncation
            self._spill_error = str(exc)
            self._spill_truncated = True
            os.close(self._spill_fd)
            self._spill_fd = None

    def read_spill(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of the stream from ``offset``, from the spill
        file through the fd that wrote it (b"" if there is none)."""
        with self._lock:
            fd, written = self._spill_fd, self._spill_written
            if fd is None or offset >= written or size <= 0:
                return b""
            return os.pread(fd, min(size, written - offset), offset)

    # -- reader side ----------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        with self._lock:
            return self._retainer.total_bytes

    @property
    def spill_path(self) -> str | None:
        with self._lock:
            return self._spill_path

    def read_from(self, offset: int) -> tuple[int, bytes]:
        """``(start, data)``: retained bytes from ``offset`` (or from the oldest
        byte still held, if ``offset`` is older); ``start`` is the stream offset
        of ``data[0]``."""
        with self._lock:
            start, window = self._retainer.window()
        if offset <= start:
            return start, window
        return offset, window[offset - start :]

    def collected(self) -> CollectedOutput:
        with self._lock:
            omitted = self._retainer.omitted
            return CollectedOutput(
                text=self._retainer.text(),
                total_bytes=self._retainer.total_bytes,
                omitted_bytes=omitted.bytes,
                omitted_lines=omitted.lines,
                spill_path=self._spill_path,
                spill_truncated=self._spill_truncated,
            )
