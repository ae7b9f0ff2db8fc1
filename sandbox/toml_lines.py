"""Where a key is set in a TOML text: the line a profile or config error names.

``tomllib`` keeps no positions, so the text is scanned for the key inside its
table; a miss is ``None`` and the error goes without a line.
"""

from __future__ import annotations

import re

from dsh.sandbox.lazy_pattern import LazyPattern

_HEADER = LazyPattern(r"\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?\Z")


def _key_pattern(key: str) -> re.Pattern[str]:
    quoted = f"(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
    return re.compile(rf"\s*{quoted}\s*[=.]")


def find_key_line(text: str, key: str, table: str | None = None) -> int | None:
    """1-based line where ``key`` is set inside ``[table]`` (top level if ``None``).

    Also finds the dotted form ``table.key = ...`` at top level, and falls back
    to the line of the table itself when the key sits in an inline table.
    """
    own = _key_pattern(key)
    dotted = _key_pattern(f"{table}.{key}") if table else None
    current: str | None = None
    table_line: int | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(1).strip().strip("\"'")
            if table is not None and current == table:
                table_line = number
            if table is not None and current == f"{table}.{key}":
                return number  # ``[[table.key]]``: an array of tables (``[[network.secrets]]``)
            continue
        if current == table and own.match(line):
            return number
        if current is None and dotted is not None and dotted.match(line):
            return number
        if current is None and table is not None and _key_pattern(table).match(line):
            table_line = number
    return table_line
