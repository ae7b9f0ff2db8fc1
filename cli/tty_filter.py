"""What a sandboxed program on ``run -t`` may send to the person's own terminal.

Full-screen programs need cursor movement, erasing, scrolling regions, the
alternate screen and modes, so CSI sequences pass.  What acts beyond the
screen does not: every string sequence (OSC: clipboard writes, hyperlinks,
titles that a later report types back; DCS: status reports and terminal
pass-through; APC, PM, SOS) is dropped whole, and so are the window
operations (``CSI ... t``: move, resize, report the title), and the 8-bit
controls (raw, or encoded in UTF-8 as U+0080..U+009F), which some terminals
take as the same sequences.

The bytes are parsed the way terminals parse them (the DEC/ECMA-48 state
machine), so that no sequence can reach the terminal in a form the filter
read differently: an ESC starts a new sequence whatever came before it (an
unfinished sequence, a string, half a UTF-8 character), CAN and SUB abort
one, and only a sequence parsed to its end is written.  Text is written as
whole, valid UTF-8 characters; a stray or invalid byte is dropped.  A
sequence split across reads is held until its end, up to a bound.
"""

from __future__ import annotations

_ESC = 0x1B
_CAN, _SUB = 0x18, 0x1A
_BEL = 0x07
_STRINGS = frozenset(b"]P_^X")  # OSC, DCS, APC, PM, SOS
_MAX_SEQUENCE = 256

#: Written when the session ends, so the person's shell gets the terminal as
#: it was: the main screen; a soft reset (DECSTR: insert and origin modes off,
#: wrapping on, normal cursor keys and keypad, no scroll region, ASCII,
#: attributes off, cursor shown), and the same one by one for terminals without
#: it; every mouse, focus and paste report off; the keyboard protocols back to
#: the default (xterm's modifyOtherKeys, kitty's stack).
RESET = (
    b"\x1b[?1049l\x1b[!p"
    b"\x1b[4l\x1b[?6l\x1b[?7h\x1b[?1l\x1b>\x1b[r\x1b(B\x0f\x1b[0m\x1b[?25h"
    b"\x1b[?9l\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l\x1b[?1004l\x1b[?1005l\x1b[?1006l\x1b[?1015l"
    b"\x1b[?1016l\x1b[?2004l\x1b[>4m\x1b[<999u"
)


def _utf8_length(lead: int) -> int:
    """Bytes in the UTF-8 character ``lead`` starts (0: not a lead byte)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


class HostTerminalFilter:
    """Feed raw pty bytes, get what may be written to the person's terminal."""

    def __init__(self) -> None:
        self._state = "ground"
        self._held = bytearray()  # the sequence or character being parsed
        self._need = 0  # bytes a UTF-8 character still needs

    def __call__(self, data: bytes) -> bytes:
        out = bytearray()
        for byte in data:
            self._feed(byte, out)
        return bytes(out)

    def _feed(self, byte: int, out: bytearray) -> None:
        # From any state: ESC starts a sequence anew, CAN and SUB abort one.
        if byte == _ESC:
            # In a string it may be the first half of its terminator (ST, ESC \).
            after = "string-end" if self._state == "string" else "escape"
            self._state, self._held = after, bytearray((byte,))
            return
        if byte in (_CAN, _SUB):
            self._state, self._held = "ground", bytearray()
            return
        state = self._state
        if state == "utf8":
            if 0x80 <= byte <= 0xBF:
                self._held.append(byte)
                self._need -= 1
                if self._need == 0:
                    self._emit_character(out)
                return
            self._state, self._held = "ground", bytearray()  # half a character: dropped
            state = "ground"
        if state == "string-end":
            if byte == ord("\\"):
                self._state, self._held = "ground", bytearray()  # the dropped string's ST
                return
            self._state = state = "escape"  # a new sequence began right after the string
        if state == "ground":
            self._ground(byte, out)
        elif state in ("escape", "escape-intermediate"):
            self._escape(byte, out)
        elif state in ("csi", "csi-intermediate", "csi-ignore"):
            self._csi(byte, out)
        elif state == "string" and byte == _BEL:
            self._state = "ground"  # BEL ends an OSC; the string was dropped whole
        # (in "string" every other byte is part of what is dropped; an ESC ends it above)

    def _ground(self, byte: int, out: bytearray) -> None:
        if byte < 0x80:
            out.append(byte)
            return
        need = _utf8_length(byte)
        if need:  # 0x80..0xBF alone, 0xC0, 0xC1, 0xF5..0xFF: never text, dropped
            self._state, self._held, self._need = "utf8", bytearray((byte,)), need - 1

    def _emit_character(self, out: bytearray) -> None:
        held, self._state, self._held = bytes(self._held), "ground", bytearray()
        try:
            point = ord(held.decode("utf-8"))
        except UnicodeDecodeError:  # overlong, a surrogate, past U+10FFFF
            return
        if not 0x80 <= point <= 0x9F:  # the 8-bit controls (CSI, OSC, DCS...) in UTF-8
            out += held

    def _escape(self, byte: int, out: bytearray) -> None:
        if byte < 0x20:
            out.append(byte)  # a C0 control inside a sequence acts at once, as a terminal does
        elif self._state == "escape" and byte == ord("["):
            self._state = "csi"
            self._held.append(byte)
        elif self._state == "escape" and byte in _STRINGS:
            self._state, self._held = "string", bytearray()
        elif 0x20 <= byte <= 0x2F:
            self._state = "escape-intermediate"
            self._held.append(byte)
            self._bound()
        elif 0x30 <= byte <= 0x7E:
            out += self._held
            out.append(byte)
            self._state, self._held = "ground", bytearray()
        elif byte >= 0x80:
            self._state, self._held = "ground", bytearray()  # not a sequence: dropped
            self._ground(byte, out)
        # DEL (0x7F) is ignored inside a sequence

    def _csi(self, byte: int, out: bytearray) -> None:
        if byte < 0x20:
            out.append(byte)
        elif byte >= 0x80:
            self._state, self._held = "ground", bytearray()
            self._ground(byte, out)
        elif 0x40 <= byte <= 0x7E:
            if self._state != "csi-ignore" and byte != ord("t"):
                out += self._held
                out.append(byte)
            self._state, self._held = "ground", bytearray()
        elif 0x20 <= byte <= 0x2F:
            self._state = "csi-intermediate" if self._state == "csi" else self._state
            self._held.append(byte)
            self._bound()
        elif 0x30 <= byte <= 0x3F:
            # A parameter after an intermediate makes the sequence malformed:
            # a terminal ignores it to its final byte, and so it is dropped.
            self._state = "csi-ignore" if self._state == "csi-intermediate" else self._state
            self._held.append(byte)
            self._bound()

    def _bound(self) -> None:
        if len(self._held) > _MAX_SEQUENCE:
            self._state = "csi-ignore" if self._state.startswith("csi") else "string"
            self._held = bytearray()
