"""Git config files as git reads them: the parser, one cached read per file, and
the chain of files a config includes.

Parsing is cached on each file's (dev, inode, mtime, ctime, size), so a search
of an unchanged set of repositories costs one ``stat`` per config file.  What
the values name, and which files count, is ``git_config.py``'s business.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.lazy_pattern import LazyPattern

_CONFIG_MAX = 1024 * 1024  # bytes read of one config file (git's own are a few KiB)
_INCLUDE_DEPTH = 10  # git's own limit on nested includes
_CHAIN_MAX = 1000  # config files read for one repository (a fan-out of includes stays bounded)


INCLUDE = LazyPattern(r"^(include|includeif\..+)\.path$")
_SECTION = LazyPattern(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)$')
_ENTRY = LazyPattern(r"^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")


def _unquote(raw: str) -> str:
    """A value without comments, quotes and escapes (as git reads it, roughly)."""
    out: list[str] = []
    quoted = False
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            out.append({"n": "\n", "t": "\t"}.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            break
        else:
            out.append(c)
        i += 1
    return "".join(out).strip()


def entries(text: str) -> Iterator[tuple[str, str]]:
    """(``section[.subsection].key`` lower-cased but the subsection, value) pairs."""
    section = ""
    pending = ""
    for line in text.splitlines():
        line = pending + line
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        line = line.strip()
        head = _SECTION.match(line)
        if head is not None:
            name, sub, line = head.group(1).lower(), head.group(2), head.group(3).strip()
            if sub is None and "." in name:  # the old ``[section.sub]`` form
                name, _, sub = name.partition(".")
            section = f"{name}.{sub}" if sub is not None else name
        entry = _ENTRY.match(line)
        if entry is not None and section:
            yield f"{section}.{entry.group(1).lower()}", _unquote(entry.group(2) or "")


# -- reading config files, cached ------------------------------------------------------------
@dataclass(frozen=True)
class _Parsed:
    key: tuple[int, int, int, int, int]  # (dev, ino, mtime_ns, ctime_ns, size)
    entries: tuple[tuple[str, str], ...]


_CACHE: dict[str, _Parsed] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_MAX = 4096  # config files remembered (bounded memory over a long session)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    # ctime too: a command can set mtime back, never ctime.
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def read_config(path: Path) -> tuple[tuple[str, str], ...] | None:
    """The entries of one config file (git follows a symlinked config), or
    ``None`` when it is missing or not a regular file.  Opened non-blocking
    (a FIFO planted as config must not hang the host), at most ``_CONFIG_MAX``
    bytes read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    with _CACHE_LOCK:
        cached = _CACHE.get(str(path))
    if cached is not None and cached.key == _stat_key(st):
        return cached.entries
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        chunks: list[bytes] = []
        left = _CONFIG_MAX
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    parsed = _Parsed(_stat_key(st), tuple(entries(b"".join(chunks).decode("utf-8", errors="replace"))))
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[str(path)] = parsed
    return parsed.entries


def expand_home(value: str) -> str:
    return os.path.expanduser(value) if value.startswith("~") else value


def config_chain(starts: Iterable[Path]) -> Iterator[tuple[Path, tuple[tuple[str, str], ...]]]:
    """Each config file of ``starts`` and, transitively, every file it includes
    (every ``includeIf`` taken as active), to git's depth limit."""
    stack = [(Path(os.path.abspath(p)), 0) for p in starts]
    seen: set[Path] = set()
    while stack and len(seen) < _CHAIN_MAX:
        path, depth = stack.pop()
        if path in seen or depth > _INCLUDE_DEPTH:
            continue
        seen.add(path)
        found = read_config(path)
        if found is None:
            yield path, ()  # missing: an include the command could create
            continue
        yield path, found
        for key, value in found:
            if INCLUDE.match(key) and value:
                value = value.removeprefix(":(optional)")
                # A relative include is relative to the including file's directory.
                target = Path(expand_home(value))
                stack.append((Path(os.path.normpath(path.parent / target)), depth + 1))
