"""Working-tree files a repository's git config makes git run or read as config.

A config value can name a program git runs on a later host command (a filter
on ``git add``, an fsmonitor on ``git status``, a pager, an alias starting with
``!``), and ``include.path`` makes another file part of the config.  When such
a value names a file in the working tree, a sandboxed command that rewrote the
file would have its code run by the user's next git command: those files are
kept read-only like the hooks, and reported when a run creates them.

The parser is deliberately lenient (it reads what git reads, and a bit more):
protecting an extra file costs a refused write, missing one costs the host.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path

from dsh.sandbox.policy_paths import canonical, read_small_file

_CONFIG_MAX = 256 * 1024
_INCLUDE_DEPTH = 10  # git's own limit on nested includes

#: Keys (lower-case, ``section[.subsection].key``) whose value is a command or
#: a program path that git or a git tool runs.
_RUNS = re.compile(
    r"""^(
      core\.(hookspath|fsmonitor|pager|editor|sshcommand|askpass|gitproxy|attributesfile)
    | sequence\.editor | diff\.external | interactive\.difffilter | web\.browser
    | uploadpack\.packobjectshook | alias\..+ | pager\..+
    | credential\.(.+\.)?helper | gpg\.(.+\.)?program
    | diff\..+\.(textconv|command) | merge\..+\.driver | filter\..+\.(clean|smudge|process)
    | (difftool|mergetool|browser|man)\..+\.(cmd|path)
    | remote\..+\.(receivepack|uploadpack) | sendemail\.(smtpserver|sendmailcmd)
    )$""",
    re.VERBOSE,
)
_INCLUDE = re.compile(r"^(include|includeif\..+)\.path$")
_SECTION = re.compile(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)$')
_ENTRY = re.compile(r"^([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$")


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


def _words(value: str) -> list[str]:
    """The program (first word) and every path-looking argument of a command."""
    value = value.lstrip("!").strip()
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return [w for i, w in enumerate(words) if i == 0 or "/" in w or w.startswith(".")]


def _inside(path: Path, top: Path) -> bool:
    return top in path.parents


def _configs(git_dirs: Sequence[Path]) -> Iterator[tuple[Path, str]]:
    """Each config file of the repository and, transitively, the files it includes."""
    stack = [(d / name, 0) for d in git_dirs for name in ("config", "config.worktree")]
    seen: set[Path] = set()
    while stack:
        path, depth = stack.pop()
        if path in seen or depth > _INCLUDE_DEPTH:
            continue
        seen.add(path)
        # Never a plain open: a FIFO planted as config would hang the host.
        text = read_small_file(path, _CONFIG_MAX)
        if text is None:
            continue
        yield path, text
        for key, value in entries(text):
            if _INCLUDE.match(key) and value:
                # A relative include is relative to the including file's directory.
                target = Path(os.path.expanduser(value))
                stack.append((canonical(target, path.parent), depth + 1))


def programs_named_in_config(dot_git: Path, git_dirs: Sequence[Path]) -> set[Path]:
    """Existing working-tree paths the repository's config makes git run or read:
    every program word and path-looking argument of a command value (commands
    run at the top of the working tree), and every included config file in the
    working tree.  Values that name nothing there (``true``, a program on
    ``PATH``) are ignored."""
    top = dot_git.parent
    real_top = canonical(top)
    out: set[Path] = set()

    def keep(path: Path) -> None:
        real = canonical(path)
        if os.path.lexists(path) and (_inside(path, top) or _inside(real, real_top)):
            out.update({path, real} if _inside(real, real_top) else {path})

    for path, text in _configs(git_dirs):
        if path.parent not in git_dirs:
            keep(path)  # an included file: part of the config
        for key, value in entries(text):
            if not _RUNS.match(key):
                continue
            for word in _words(value):
                word = os.path.expanduser(word)
                keep(Path(os.path.normpath(word if os.path.isabs(word) else top / word)))
    return out
