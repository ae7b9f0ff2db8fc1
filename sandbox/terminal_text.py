"""Text a terminal shows and never obeys: what the approval prompt and the
CLI's notes print of what a command chose (its command line, paths, names)."""

from __future__ import annotations

import re
import unicodedata

from dsh.sandbox.lazy_pattern import LazyPattern


def printable(text: str, keep: str = "") -> str:
    """Escape what a terminal would act on instead of show, so a command cannot
    repaint the prompt: control characters (ESC, CR, BS...), format characters
    (bidi overrides such as U+202E), and line/paragraph separators.  ``keep``:
    characters left as they are (``"\\n\\t"`` for a command's output)."""
    return "".join(c if c in keep or _shown_as_is(c) else _escape(c) for c in text)


def _shown_as_is(c: str) -> bool:
    category = unicodedata.category(c)
    return not (category.startswith("C") or category in ("Zl", "Zp"))


def _escape(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


#: Written before the prompt on a terminal: CAN aborts an escape sequence in
#: progress and ST ends an open OSC/DCS string (which would otherwise swallow
#: the prompt), then attributes off (no invisible text), the main screen (a
#: fake prompt drawn on the alternate screen disappears), no scroll region,
#: the ASCII character set, a visible cursor, line wrapping back on (a long
#: ``command:`` line is not cut at the margin), insert and origin modes off
#: (text typed over, the prompt where it is written) and the default foreground,
#: background and cursor colours (OSC 110/111/112: resets, never queries).
TERMINAL_RESET = (
    "\x18\x1b\\\x1b[0m\x1b[?1049l\x1b[r\x1b(B\x0f\x1b[?25h\x1b[?7h\x1b[4l\x1b[?6l"
    "\x1b]110\x1b\\\x1b]111\x1b\\\x1b]112\x1b\\"
)


#: A run of whitespace at least this long is shown as its length: a command
#: padded with spaces would push its real start off the screen.
_LONG_BLANKS = 16
_BLANKS = LazyPattern(r"[ \t]{" + str(_LONG_BLANKS) + ",}")
#: Past this many characters the prompt says how long the command is.
LONG_COMMAND = 2000


def command_shown(command: str) -> str:
    """The prompt's ``command:`` line: escaped, long blank runs counted, and
    for a long command its length first."""

    def blanks(match: re.Match[str]) -> str:
        run = match.group()
        kind = "spaces" if set(run) == {" "} else "tabs" if set(run) == {"\t"} else "blanks"
        return f"[{len(run)} {kind}]"

    shown = printable(_BLANKS.sub(blanks, command))
    head = ""
    if len(command) > LONG_COMMAND:
        head = f"  length:        {len(command)} characters (long blank runs shown as [N spaces])\n"
    return f"{head}  command:       {shown}\n"
