"""The sandbox's own ``HOME``: a writable home for tools that cache there.

Test runners, package managers and compilers write under ``$HOME`` (nyc's
spawn-wrap shims in ``~/.node-spawn-wrap-*``, pip's and go's caches in
``~/.cache``, cargo's registry in ``~/.cargo``).  The real home must never be
writable (shell start-up files, ``~/.ssh``), so a constrained command gets
another one: a directory per workspace under the user's cache directory
(``$XDG_CACHE_HOME/dsh-sandbox/home/<name>-<hash>``, mode 0700), outside the
workspace, so caches survive between runs of the same project and never mix
with another project's.  The real home stays readable (minus the hidden
paths): the user's git, pip and rustup settings are pointed at explicitly.

Where that directory cannot be created (a user without a writable home), the
command keeps the real, read-only HOME, as it would with ``home = "host"``.
A profile turns this off with ``home = "host"`` (``HOME`` is the real,
read-only home) or names another directory (``home = "~/sandbox-home"``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from dsh.sandbox.errors import ConfigError
from dsh.sandbox.lazy_pattern import LazyPattern
from dsh.sandbox.own_dirs import OwnDirUnavailable, open_own_dir
from dsh.sandbox.own_state import cache_base
from dsh.sandbox.pins import walk
from dsh.sandbox.policy_paths import expand

PER_WORKSPACE = "per-workspace"
HOST = "host"

#: Variables ``home_env`` may set; a remote runner, whose machine has its own
#: home, drops them with the other host-only facts.
HOME_ENV_NAMES = frozenset({"HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "RUSTUP_HOME"})

class HomeUnavailable(ConfigError):
    """The directory cannot be created here (no writable home, e.g. ``nobody``'s
    ``/nonexistent``): the per-workspace default then keeps the real HOME."""


_UNSAFE = LazyPattern(r"[^A-Za-z0-9._-]+")


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """dsh-sandbox's cache: ``own_state.cache_base()/dsh-sandbox``, the very
    directory every run hides from the others."""
    base = cache_base(environ)
    if base is None:
        raise HomeUnavailable("no sandbox HOME: neither XDG_CACHE_HOME nor HOME is an absolute path, and this "
                              "user has no home directory; set HOME (or XDG_CACHE_HOME) to a directory you own")
    return base / "dsh-sandbox"


def homes_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the per-workspace homes live: ``cache_dir()/home``."""
    return cache_dir(environ) / "home"


def workspace_home(workspace: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """The home of ``workspace``: its name (readable in ``ls``) plus a hash of its full path
    (two checkouts called ``app`` never share one)."""
    name = _UNSAFE.sub("_", workspace.name)[:40] or "root"
    digest = _sha256_hex(os.fsencode(workspace))[:12]
    return homes_dir(environ) / f"{name}-{digest}"


_HOME_FIX = 'set home = "host" in the profile'


def ensure_private_dir(path: Path, label: str) -> Path:
    """Creates ``path`` (and missing parents) with mode 0700 and checks that it
    is a directory of ours that nobody else can enter; returns it canonical.

    Reached without following a link a sandboxed command could have planted
    (``own_dirs``): whoever planted it would choose which directory the
    sandbox may write, and which one the host makes private.
    """
    try:
        own = open_own_dir(path, label, _HOME_FIX)
    except OwnDirUnavailable as exc:
        raise HomeUnavailable(str(exc)) from None
    own.close()
    return own.path


def resolve_home(setting: str | None, workspace: Path, label: str) -> Path | None:
    """The canonical home a profile's ``home`` setting names (``None``: keep the real one)."""
    raw = setting or PER_WORKSPACE
    if raw == HOST:
        return None
    if raw == PER_WORKSPACE:
        # A link on the way could send the command's writes anywhere.
        try:
            return ensure_private_dir(workspace_home(workspace), label)
        except HomeUnavailable:
            return None  # no worse than home = "host": the real HOME, read-only
    expanded = expand(raw)
    if expanded is None:
        raise ConfigError(f"{label} = {raw!r} names an unset environment variable; set it or "
                          'write home = "per-workspace"')
    path = _resolved(label, raw, workspace / expanded)
    if not path.is_dir():
        raise ConfigError(f"{label} = {raw!r}: {path} is not an existing directory; create it, "
                          'or write home = "per-workspace" (or "host" for the real, read-only home)')
    return path


def _resolved(label: str, raw: str, path: Path) -> Path:
    """``path`` resolved by one walk that refuses a link a sandboxed command
    could have planted (the policy service then holds the result by fd)."""
    resolved = walk(label, raw, path)
    if resolved.pin is not None:
        os.close(resolved.pin.fd)
    return resolved.path


#: The last policy's hidden paths and their names: each command of a session
#: asks again with the same tuple, one entry per workspace this user has run in.
_last_hidden: tuple[tuple[Path, ...], frozenset[str]] | None = None


def _names_of(hidden: Iterable[Path]) -> frozenset[str]:
    global _last_hidden
    last = _last_hidden
    if last is not None and last[0] is hidden:
        return last[1]
    names = frozenset(map(str, hidden))
    if isinstance(hidden, tuple):
        _last_hidden = (hidden, names)
    return names


def home_env(home: Path, environ: Mapping[str, str], hidden: Iterable[Path] = ()) -> dict[str, str]:
    """The variables that move a command into ``home`` while the user's own
    settings in the real home stay readable (read-only, as everything there).

    ``environ`` is the command's environment before the move: a variable it
    already sets (a profile's passthrough) is kept.
    """
    # A set of names, each variable's path and its ancestors looked up in it:
    # there is one hidden path per other workspace's HOME.
    hidden_names = _names_of(hidden)  # canonical already: the policy's
    real = Path(environ.get("HOME") or os.path.expanduser("~"))

    def visible(path: Path) -> bool:
        name = os.path.normpath(path)
        while name not in hidden_names:
            parent = os.path.dirname(name)
            if parent == name:
                return True
            name = parent
        return False

    env = {"HOME": str(home)}
    wanted = {"XDG_CACHE_HOME": (home / ".cache", True)}
    # git reads ~/.gitconfig; the XDG config dir holds git's, pip's and many more
    # settings; rustup's proxies in ~/.cargo/bin need the real toolchains.
    wanted["GIT_CONFIG_GLOBAL"] = (real / ".gitconfig", (real / ".gitconfig").is_file())
    wanted["XDG_CONFIG_HOME"] = (real / ".config", (real / ".config").is_dir())
    wanted["RUSTUP_HOME"] = (real / ".rustup", (real / ".rustup").is_dir())
    for name, (path, usable) in wanted.items():
        if usable and name not in environ and visible(path):
            env[name] = str(path)
    return env



def _sha256_hex(data: bytes) -> str:
    """SHA-256 from CPython's own module where there is one (``_sha2`` from
    3.12, ``_sha256`` before): ``hashlib`` loads OpenSSL first, a few
    milliseconds of every sandboxed run."""
    import importlib

    for name in ("_sha2", "_sha256"):
        try:
            return str(importlib.import_module(name).sha256(data).hexdigest())
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256(data).hexdigest()
