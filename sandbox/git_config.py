"""Files in the writable roots that git's configuration makes git run or read as config.

A config value can name a program git runs on a later host command (a filter
on ``git add``, an fsmonitor on ``git status``, a pager, an alias starting with
``!``), and ``include.path`` makes another file part of the config.  When such
a value names a file a sandboxed command can write, the command's code would
run at the user's next git command: those files are kept read-only like the
hooks, and reported when a run creates or changes them.

Every config git reads counts: the system file (``/etc/gitconfig``, the one
under each ``git``'s prefix, ``$GIT_CONFIG_SYSTEM``), the global ones
(``$GIT_CONFIG_GLOBAL``, ``$XDG_CONFIG_HOME/git/config``, ``~/.gitconfig``),
``GIT_CONFIG_COUNT``/``GIT_CONFIG_PARAMETERS``, each repository's ``config``
and ``config.worktree``, and every file they include.  The user's later git
may run with other variables than this process, so every candidate is read
(a superset of what git's precedence would pick); every ``includeIf`` is taken
as active whatever its condition.

A command value protects every word that names an existing file, bare names
included (``python3 fsm.py``, ``!sh tools.sh``), the scripts of ``sh -c``
arguments word by word, and the files some programs read by default
(``make``: ``Makefile``).  Relative words are taken from where git runs them:
the top of the working tree (git changes there before running anything), the
git dir of a bare repository, ``core.worktree``.  A false protect costs a
refused write; a miss costs code execution on the host.

Parsing is cached on each file's (dev, inode, mtime, ctime, size), so a search
of an unchanged set of repositories costs one ``stat`` per config file.
"""

from __future__ import annotations

import functools
import os
import pwd
import re
import shlex
import shutil
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from dsh.sandbox.git_config_files import INCLUDE, config_chain, expand_home
from dsh.sandbox.git_value_words import command_words
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.policy_paths import canonical

#: Keys (lower-case, ``section[.subsection].key``) whose value is a command or
#: a program path that git or a git tool runs.
_RUNS = LazyPattern(
    r"""^(
      core\.(hookspath|fsmonitor|pager|editor|sshcommand|askpass|gitproxy|attributesfile|worktree)
    | sequence\.editor | diff\.external | diff\.tool | merge\.tool | interactive\.difffilter | web\.browser
    | uploadpack\.packobjectshook | alias\..+ | pager\..+ | init\.templatedir
    | credential\.(.+\.)?helper | gpg\.(.+\.)?program | ssh\.variant
    | diff\..+\.(textconv|command) | merge\..+\.driver | filter\..+\.(clean|smudge|process)
    | (difftool|mergetool|browser|man)\..+\.(cmd|path)
    | remote\..+\.(receivepack|uploadpack|vcs) | sendemail\.(smtpserver|sendmailcmd|tocmd|cccmd)
    | lfs\.customtransfer\..+\.path | lfs\.extension\..+\.(clean|smudge)
    )$""",
    re.VERBOSE,
)
#: Keys whose value names a file git reads and trusts (not runs): what it
#: ignores, signs with, verifies against, sends cookies or certificates from.
_FILES = LazyPattern(
    r"""^(
      core\.excludesfile | commit\.template | blame\.ignorerevsfile | mailmap\.file | user\.signingkey
    | gpg\.ssh\.allowedsignersfile | gpg\.ssh\.revocationfile
    | http\.(.+\.)?(sslcainfo|sslcapath|sslcert|sslkey|cookiefile)
    )$""",
    re.VERBOSE,
)
#: Keys whose value may name a directory git runs from or copies into new
#: repositories: a directory there is protected whole.
_DIR_KEYS = frozenset(("core.hookspath", "init.templatedir", "core.worktree"))
#: The hooks git runs (``githooks(5)``): what a hooks directory that is also a
#: working tree or a root (``core.hooksPath = .``) holds that git would run.
_HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
    "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
    "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
    "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
    "post-index-change",
)  # fmt: skip
def _git_prefixes() -> frozenset[Path]:
    """``$(prefix)`` of each ``git`` on ``PATH`` (``/usr/bin/git`` -> ``/usr``)."""
    return _prefixes_on(os.environ.get("PATH", os.defpath))


@functools.lru_cache(maxsize=8)
def _prefixes_on(path: str) -> frozenset[Path]:
    out: set[Path] = set()
    found = shutil.which("git", path=path)
    for git in {found, os.path.realpath(found)} if found else set():
        out.add(Path(git).parent.parent)
    return frozenset(out)


def _homes() -> set[Path]:
    """``$HOME`` and the caller's passwd homes: a later git may run with either."""
    out: set[Path] = set()
    if os.environ.get("HOME"):
        out.add(Path(os.environ["HOME"]))
    # The passwd home, and the home of the user who ran sudo: their next git
    # runs as them.
    for user in (os.getuid(), os.environ.get("SUDO_USER")):
        try:
            entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user or "")
        except (KeyError, ValueError):
            continue
        out.add(Path(entry.pw_dir))
    return out


def host_config_files() -> list[Path]:
    """Every system and global config file git could read on this host, existing or not."""
    files: list[Path] = [Path("/etc/gitconfig")]
    files += [prefix / "etc" / "gitconfig" for prefix in sorted(_git_prefixes())]
    for var in ("GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL"):
        value = os.environ.get(var)
        if value and value != "/dev/null":
            files.append(Path(expand_home(value)))
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg:
        files.append(Path(xdg) / "git" / "config")
    for home in sorted(_homes()):
        files += [home / ".config" / "git" / "config", home / ".gitconfig"]
    return list(dict.fromkeys(Path(os.path.abspath(f)) for f in files))


def _env_entries() -> list[tuple[str, str]]:
    """Config given through the environment (``git -c`` passes it on this way)."""
    out: list[tuple[str, str]] = []
    try:
        count = int(os.environ.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    for i in range(min(count, 1000)):
        key = os.environ.get(f"GIT_CONFIG_KEY_{i}", "")
        out.append((key.lower(), os.environ.get(f"GIT_CONFIG_VALUE_{i}", "")))
    params = os.environ.get("GIT_CONFIG_PARAMETERS", "")
    if params:
        try:
            words = shlex.split(params)
        except ValueError:
            words = params.split()
        for word in words:
            key, _, value = word.partition("=")
            out.append((key.lower(), value))
    return out


HostConfig = tuple[list[tuple[str, str]], list[Path]]


def host_entries() -> HostConfig:
    """Entries of every host-wide config (system, global, environment), and
    every file that is part of it (includes, missing ones too)."""
    values: list[tuple[str, str]] = []
    files: list[Path] = []
    for path, found in config_chain(host_config_files()):
        files.append(path)
        values += found
    env = _env_entries()
    values += env
    extra = [Path(expand_home(v)) for k, v in env if INCLUDE.match(k) and v]
    for path, found in config_chain(p for p in extra if p.is_absolute()):
        files.append(path)
        values += found
    return values, files


# -- what the values name ---------------------------------------------------------------------
def _inside(path: Path | str, tops: Iterable[Path]) -> bool:
    text = str(path)
    for top in tops:
        t = str(top)
        if text == t or text.startswith(t.rstrip("/") + "/"):
            return True
    return False


def _candidates(key: str, value: str) -> frozenset[str]:
    if _RUNS.match(key):
        return command_words(value)
    if _FILES.match(key) and value and "\n" not in value and len(value) < 4096:
        return frozenset((value,))
    # Not every value: ``init.defaultBranch = main`` would protect a binary called ``main``.
    return frozenset()


def _named(
    values: Iterable[tuple[str, str]], bases: Sequence[Path], within: Sequence[Path], *, missing: bool = False
) -> set[Path]:
    """Existing files (and directories, for directory keys) the values name,
    relative words taken from each of ``bases``, kept when inside ``within``;
    a link is kept with its target.  ``missing``: names of paths that do not
    exist yet are kept too (the caller makes them uncreatable)."""
    out: set[Path] = set()
    for key, value in values:
        dirs_too = key in _DIR_KEYS
        for word in _candidates(key, value):
            word = expand_home(word)
            if "\0" in word:
                continue
            places = [word] if os.path.isabs(word) else [os.path.join(base, word) for base in bases]
            for place in places:
                path = os.path.normpath(place)
                try:
                    st = os.stat(path)
                except (OSError, ValueError):
                    if missing and not os.path.lexists(path):
                        out |= {Path(p) for p in (path, str(canonical(path))) if _inside(p, within)}
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if not dirs_too:
                        continue  # ``cd src``: a directory argument names no program
                    if any(_inside(b, [Path(path)]) for b in (*bases, *within)):
                        # The working tree or a root itself: its hook files, not all of it.
                        out |= _named([(key, os.path.join(path, h)) for h in _HOOKS], bases, within,
                                      missing=missing)
                        continue
                real = str(canonical(path))
                if _inside(path, within):
                    out.add(Path(path))
                if _inside(real, within):
                    out.add(Path(real))
    return out


def _bases(dot_git: Path, git_dirs: Sequence[Path], values: Iterable[tuple[str, str]]) -> list[Path]:
    """Where git runs what a repository's config names: the top of its working
    tree (``core.worktree`` too), or the git dir of a bare repository."""
    bases = [dot_git.parent] if dot_git.name == ".git" else [dot_git, dot_git.parent]
    for key, value in values:
        if key == "core.worktree" and value:
            for git_dir in git_dirs:
                bases.append(Path(os.path.normpath(git_dir / expand_home(value))))
    return list(dict.fromkeys(bases))


def repo_config_files(git_dirs: Sequence[Path]) -> list[Path]:
    """A repository's own config files (the worktree config of each linked worktree too)."""
    files: list[Path] = []
    for git_dir in git_dirs:
        files += [git_dir / "config", git_dir / "config.worktree"]
    return files


def programs_named_in_config(
    dot_git: Path,
    git_dirs: Sequence[Path],
    roots: Sequence[Path] = (),
    host: HostConfig | None = None,
    *,
    missing: bool = False,
) -> set[Path]:
    """Existing paths that git's configuration, as it applies to this
    repository (host-wide configs, the repository's own, their includes),
    makes git run or read: every word of a command value that names a file
    where git would run it, and every included config file.  Kept when they
    lie inside ``roots`` (or the working tree, when no roots are given).
    ``host`` is ``host_entries()``, read once for many repositories.
    ``missing``: paths not there yet too (for a repository above every root,
    where a relative word reaches a root only through its path from the top,
    so a bare word such as ``status`` never names a file in the root)."""
    own_files = repo_config_files(git_dirs)
    own = list(config_chain(own_files))
    own_values = [kv for _path, found in own for kv in found]
    host_values, _host_files = host if host is not None else host_entries()
    bases = _bases(dot_git, git_dirs, own_values)
    within = list(roots) or [dot_git.parent, canonical(dot_git.parent)]
    out = _named([*own_values, *host_values], bases, within, missing=missing)
    own_paths = {Path(os.path.abspath(p)) for p in own_files}  # kept by the repository's own protection
    for path, _found in own:
        # An included file is part of the config, in the git dir too
        # (``include.path = extra.cfg`` is ``.git/extra.cfg``), which stays
        # writable under ``git = "commit"``.
        if path not in own_paths and os.path.lexists(path) and _inside(path, within):
            out.add(path)
    return out


def host_named_paths(roots: Sequence[Path], host: HostConfig | None = None) -> set[Path]:
    """Paths inside ``roots`` that a host-wide config is made of or names:
    the config files themselves, existing or not (``GIT_CONFIG_GLOBAL`` in a
    workspace, an included file there), what an absolute (or ``~``) word of a
    value names, existing or not, and what a relative word names directly in
    a root (git run outside any repository runs it from the user's cwd).
    Relative names inside repositories are resolved per repository by
    ``programs_named_in_config``."""
    values, files = host if host is not None else host_entries()
    out = {f for f in files if _inside(f, roots)}
    relative: list[tuple[str, str]] = []
    for key, value in values:
        for word in _candidates(key, value):
            word = expand_home(word)
            if not os.path.isabs(word) or "\0" in word:
                relative.append((key, word))
                continue
            path = Path(os.path.normpath(word))
            if _inside(path, roots) and (key in _DIR_KEYS or not os.path.isdir(path)):
                out.add(path)
    return out | _named(relative, roots, roots)


#: Directory keys whose missing directory may stand as an empty placeholder.
_PLACEHOLDER_DIR_KEYS = frozenset(("core.hookspath", "init.templatedir"))


def host_missing_dirs(roots: Sequence[Path], host: HostConfig | None = None) -> set[Path]:
    """Directories inside ``roots`` that a host-wide ``core.hooksPath`` or
    ``init.templateDir`` names by absolute (or ``~``) path and that do not exist
    yet: a command could create and fill them.  Not a root itself or an
    ancestor of one (that would make a root read-only)."""
    values, _files = host if host is not None else host_entries()
    out: set[Path] = set()
    for key, value in values:
        if key not in _PLACEHOLDER_DIR_KEYS or not value or "\0" in value:
            continue
        word = expand_home(value)
        if not os.path.isabs(word):
            continue
        path = Path(os.path.normpath(word))
        if os.path.lexists(path) or not _inside(path, roots):
            continue
        if not any(r == path or r.is_relative_to(path) for r in roots):
            out.add(path)
    return out
