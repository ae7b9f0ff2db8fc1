"""Entry points read from the ``entry_points.txt`` files on the import path, with ``os`` alone.

The registry builds its entry points from this, and the command line's
``--help`` checks here, before importing click, whether another package adds
a command: so this module imports nothing that interpreter start-up has not.
Like ``importlib.metadata``, the first distribution of a name on the path wins.
Zip archives on the path are not searched (no runner is installed that way).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

DIST_SUFFIXES = (".dist-info", ".egg-info")
_SEPARATORS = "-_."


def dist_name(dirname: str) -> str:
    """The normalized project name of a ``name-version.dist-info`` directory:
    runs of ``-``, ``_`` and ``.`` become one ``-``, lowercased."""
    stem = dirname.rsplit(".", 1)[0].split("-")[0]
    out: list[str] = []
    for char in stem:
        if char in _SEPARATORS:
            if not out or out[-1] != "-":
                out.append("-")
        else:
            out.append(char)
    return "".join(out).lower()


def section(text: str, group: str) -> list[tuple[str, str]]:
    """``(name, value)`` of each entry of ``[group]`` in an ``entry_points.txt``."""
    current = None
    found: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1].strip()
            continue
        if current == group and "=" in line:
            name, _, value = line.partition("=")
            found.append((name.strip(), value.strip()))
    return found


def scan(group: str, path: Iterable[str]) -> list[tuple[str, str, str]]:
    """``(name, value, distribution)`` of each entry point of ``group`` declared
    by the first distribution of each name on ``path``, in path order."""
    seen: set[str] = set()
    found: list[tuple[str, str, str]] = []
    for entry in path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if n.endswith(DIST_SUFFIXES))
        except OSError:
            continue  # a file (zip) or a missing directory
        for dirname in names:
            dist = dist_name(dirname)
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(entry or ".", dirname, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            found += [(name, value, dist) for name, value in section(text, group)]
    return found

