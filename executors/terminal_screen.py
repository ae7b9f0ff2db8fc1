"""A session's screen: a maintained terminal emulator (``pyte``), bounded whatever the program prints.

The screen is ``rows x cols`` cells plus at most ``scrollback`` lines above
it; escape sequences are interpreted by the emulator, never passed on, so
nothing a program prints reaches a person's terminal raw.  ``pyte`` is
imported when the first screen is made (the terminal extra), never on the
one-shot path.
"""

from __future__ import annotations

import codecs
import functools
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


@functools.cache
def _screen_class() -> Any:
    """pyte's ``HistoryScreen`` whose CSI handlers ignore a form they do not
    take: pyte passes ``private=True`` (``CSI ? 4 m``, which vim sends) and
    every parameter given (``CSI 1;2 A``) to handlers whose signatures refuse
    them, and the ``TypeError`` killed the parser for good."""
    pyte = _pyte()
    base = pyte.HistoryScreen

    def tolerant(name: str) -> Any:
        method = getattr(base, name)

        def handler(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except TypeError:
                return None  # a form this emulator does not know: ignored, as a terminal would
        return handler

    return type("TolerantScreen", (base,), {name: tolerant(name) for name in set(pyte.Stream.csi.values())})


class TerminalScreen:
    """Feed raw pty bytes, read the viewport and the scrollback.  Not thread-safe."""

    def __init__(self, rows: int, cols: int, scrollback: int) -> None:
        pyte = _pyte()
        self.rows = rows
        self.cols = cols
        self._screen = _screen_class()(cols, rows, history=max(1, scrollback), ratio=0.5)
        self._stream = pyte.Stream(self._screen)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.fed = 0

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.fed += len(data)
        try:
            self._stream.feed(self._decoder.decode(data))
        except Exception:  # whatever the emulator trips on, the session goes on
            # An exception inside pyte's parser ends it (a generator): the rest
            # of this chunk is lost, a new parser takes the next one.
            self._stream = _pyte().Stream(self._screen)

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
