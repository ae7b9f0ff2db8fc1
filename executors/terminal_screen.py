"""A session's screen: a maintained terminal emulator (``pyte``), bounded whatever the program prints.

The screen is ``rows x cols`` cells plus at most ``scrollback`` lines above
it; escape sequences are interpreted by the emulator, never passed on, so
nothing a program prints reaches a person's terminal raw.  ``pyte`` is
imported when the first screen is made (the terminal extra), never on the
one-shot path.
"""

from __future__ import annotations

import codecs
from typing import Any

from dsh.sandbox.errors import SandboxUnavailable


def _pyte() -> Any:
    try:
        import pyte
    except ImportError:
        raise SandboxUnavailable(
            "terminal sessions need the screen emulator: pip install 'dsh-sandbox[terminal]'"
        ) from None
    return pyte


class TerminalScreen:
    """Feed raw pty bytes, read the viewport and the scrollback.  Not thread-safe."""

    def __init__(self, rows: int, cols: int, scrollback: int) -> None:
        pyte = _pyte()
        self.rows = rows
        self.cols = cols
        self._screen = pyte.HistoryScreen(cols, rows, history=max(1, scrollback), ratio=0.5)
        self._stream = pyte.Stream(self._screen)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.fed = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.fed += len(data)
        self._stream.feed(self._decoder.decode(data))

    def resize(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self._screen.resize(rows, cols)

    def viewport(self) -> tuple[str, ...]:
        return tuple(line.rstrip() for line in self._screen.display)

    @property
    def cursor(self) -> tuple[int, int]:
        return (self._screen.cursor.y, self._screen.cursor.x)

    def scrollback(self, max_lines: int) -> tuple[str, ...]:
        top = list(self._screen.history.top)[-max_lines:] if max_lines > 0 else []
        return tuple("".join(line[x].data for x in range(self.cols)).rstrip() for line in top)

    @property
    def scrollback_lines(self) -> int:
        return len(self._screen.history.top)
