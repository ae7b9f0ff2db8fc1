"""The session screen (pyte) survives every form of escape sequence a program can print."""

from __future__ import annotations

import pytest
from dsh.executors.terminal_screen import TerminalScreen

pytest.importorskip("pyte", reason="SANDBOX_UNAVAILABLE: the terminal extra (pyte) is not installed")

#: Forms pyte 0.8 hands to handlers that refuse them (``private=True``, extra
#: parameters): each raised TypeError inside its parser, which ended it.
ODD_FORMS = ["\x1b[?4m", "\x1b[?1;2m", "\x1b[1;2A", "\x1b[1;2;3H", "\x1b[?5n", "\x1b[2;3;4r", "\x1b[1;2@"]


@pytest.mark.parametrize("form", ODD_FORMS)
def test_a_form_the_emulator_does_not_take_is_ignored_and_the_screen_goes_on(form: str) -> None:
    screen = TerminalScreen(rows=5, cols=40, scrollback=10)
    screen.feed(f"before{form}\r\n".encode())
    screen.feed(b"after\r\n")
    screen.feed(b"\x1b[1mbold\x1b[0m again")
    shown = screen.viewport()
    assert shown[0] == "before" and shown[1] == "after" and shown[2] == "bold again", shown
