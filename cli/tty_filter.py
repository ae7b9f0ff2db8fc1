"""What a sandboxed program on ``run -t`` may send to the person's own terminal.

Full-screen programs need cursor movement, erasing, scrolling regions, the
alternate screen and modes, so CSI sequences pass.  What acts beyond the
screen does not: every string sequence (OSC: clipboard writes, hyperlinks,
titles that a later report types back; DCS: status reports and terminal
pass-through; APC, PM, SOS) is dropped whole, and so are the window
operations (``CSI ... t``: move, resize, report the title), and the 8-bit
controls encoded in UTF-8 (U+0080..U+009F), which some terminals take as the
same sequences.  A sequence split across reads is held until its end, up to
a bound.
"""

from __future__ import annotations

_ESC = 0x1B
_C1_LEAD = 0xC2
_BEL = 0x07
_STRINGS = frozenset(b"]P_^X")  # OSC, DCS, APC, PM, SOS
_MAX_CSI = 256

#: Written when the session ends: leave the alternate screen, show the cursor,
#: and turn off mouse reporting, bracketed paste and attributes a program left on.
RESET = b"\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[0m"


class HostTerminalFilter:
    """Feed raw pty bytes, get what may be written to the person's terminal."""

    def __init__(self) -> None:
        self._state = "text"
        self._held = bytearray()

    def __call__(self, data: bytes) -> bytes:
        out = bytearray()
        for byte in data:
            state = self._state
            if state == "text":
                if byte == _ESC:
                    self._state, self._held = "esc", bytearray([byte])
                elif byte == _C1_LEAD:
                    self._state = "c1"
                else:
                    out.append(byte)
            elif state == "c1":
                # U+0080..U+009F in UTF-8: the 8-bit controls (CSI, OSC, DCS...)
                # that a terminal such as xterm acts on like their ESC forms.
                if not 0x80 <= byte <= 0x9F:
                    out += bytes((_C1_LEAD, byte))
                self._state = "text"
            elif state == "esc":
                if byte == ord("["):
                    self._state = "csi"
                    self._held.append(byte)
                elif byte in _STRINGS:
                    self._state, self._held = "string", bytearray()
                else:
                    out += self._held
                    out.append(byte)
                    self._state, self._held = "text", bytearray()
            elif state == "csi":
                self._held.append(byte)
                if 0x40 <= byte <= 0x7E:
                    if byte != ord("t"):
                        out += self._held
                    self._state, self._held = "text", bytearray()
                elif len(self._held) > _MAX_CSI:
                    self._state, self._held = "text", bytearray()  # not a real sequence: dropped
            elif state == "string":
                if byte == _BEL:
                    self._state = "text"
                elif byte == _ESC:
                    self._state = "string-esc"
            elif state == "string-esc":
                # ESC \ ends the string; any other ESC inside it is still part of what is dropped.
                self._state = "text" if byte == ord("\\") else "string"
        return bytes(out)
