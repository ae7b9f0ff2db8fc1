"""dsh-sandbox's own state, kept out of every command's reach.

Its files decide what a later run of dsh-sandbox does, or hold what other
runs produced (its installation is ``own_install``'s):

- its **state**: the per-workspace sandbox HOMEs, the spill files and each
  session's private ``/tmp`` (``$XDG_CACHE_HOME/dsh-sandbox``,
  ``$XDG_RUNTIME_DIR/dsh-sandbox``, ``/var/tmp/dsh-sandbox-<uid>``,
  ``/var/tmp/dsh-sandbox-tmp-<uid>``), the escalation log (``$DSH_HOME``, default
  ``~/.dsh``) and the user's configuration (``$XDG_CONFIG_HOME/dsh-sandbox``,
  ``~/.config/dsh-sandbox``).  None of these may be a writable root, inside
  one or containing one, forced or not: a command could read or rewrite every
  other workspace's HOME and every session's output, or write the next run's
  configuration.  The exceptions are the run's own HOME and private ``/tmp``,
  roots of their own.  Other
  sessions' entries are hidden from every run (``hidden_state``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from dsh.sandbox import state_places
from dsh.sandbox.policy_paths import canonical, is_within

#: The files of ``$DSH_HOME`` that runs must not read: the escalation log and
#: the record of denied runs (what a re-run may be approved on).
LOG_FILES = ("escalations.jsonl", "denied-runs.jsonl")

#: Where the login manager makes each uid's ``XDG_RUNTIME_DIR``.
LOGIN_RUNTIME = "/run/user"


def user_home(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``$HOME`` when absolute, else this uid's home in the password database
    (where ``~`` leads without ``HOME``), when absolute.  Every path of
    dsh-sandbox's state derives from this one answer: the state a run writes
    and the state every other run hides must be the same directories."""
    home = environ.get("HOME", "")
    if os.path.isabs(home):
        return Path(home)
    return _password_home()


def _password_home() -> Path | None:
    import pwd

    try:
        entry = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return None
    return Path(entry) if os.path.isabs(entry) else None


def runtime_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``$XDG_RUNTIME_DIR`` when it is what the XDG spec promises: an absolute
    path to a directory (not a link) this uid owns and no one else may enter
    (mode 0700).  Anything else (``/``, ``/dev``, a shared directory) is
    ignored as an unset one is: dsh-sandbox never makes its state there."""
    value = environ.get("XDG_RUNTIME_DIR", "")
    return Path(value) if os.path.isabs(value) and _private_dir(value) else None


def _private_dir(path: str) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077


def cache_base(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``$XDG_CACHE_HOME`` when absolute (a relative one is invalid by the XDG
    spec), else ``~/.cache``."""
    cache = environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(cache):
        return Path(cache)
    home = user_home(environ)
    return home / ".cache" if home is not None else None


def dsh_home(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the escalation log lives: ``$DSH_HOME`` (a relative one from the
    current directory), else ``~/.dsh``."""
    value = environ.get("DSH_HOME", "")
    if value:
        return Path(os.path.abspath(value))
    home = user_home(environ)
    return home / ".dsh" if home is not None else None


def spill_candidates(environ: Mapping[str, str], uid: int) -> list[tuple[Path, tuple[str, ...]]]:
    """Spill directories to try, best first: ``(anchor, parts)``.  The whole
    path is walked without following a link a command could have planted
    (``own_dirs``); ``parts`` are ours, made 0700 when missing."""
    out: list[tuple[Path, tuple[str, ...]]] = []
    runtime = runtime_dir(environ)
    if runtime is not None:
        out.append((runtime, ("dsh-sandbox", "spill")))
    cache = cache_base(environ)
    if cache is not None:
        out.append((cache, ("dsh-sandbox", "spill")))
    out.append((Path("/var/tmp"), (f"dsh-sandbox-{uid}",)))
    return out


def runner_state_candidates(name: str, environ: Mapping[str, str], uid: int) -> list[tuple[Path, tuple[str, ...]]]:
    """Where the host may keep a runner's private state for this uid (bundles,
    a sandbox's own bookkeeping), best first, as ``spill_candidates``: inside
    dsh-sandbox's state directories, which every run hides and no writable
    root may hold, so no other sandboxed run can read or rewrite it."""
    return [(anchor, (*parts[:1], name)) for anchor, parts in spill_candidates(environ, uid)]


def log_dir_refusal(run_homes: Iterable[Path] = (), environ: Mapping[str, str] = os.environ) -> str | None:
    """Why ``$DSH_HOME`` (the escalation log and the record of denied runs)
    may not be used: it lies where sandboxed runs write (a sandbox HOME, a
    private ``/tmp``, the spill files, or ``run_homes``), so a plain run could
    forge what a later escalation trusts."""
    log = dsh_home(environ)
    if log is None:
        return None
    real = canonical(log)
    places = [*_run_dirs(environ, os.geteuid()), *((canonical(h), "a sandbox HOME") for h in run_homes)]
    for path, holds in places:
        if is_within(real, path):
            return (f"DSH_HOME {log}: {real} lies inside {path} ({holds}), where sandboxed commands write, so a "
                    "run could forge the escalation log or the record of denied runs; set DSH_HOME to a "
                    "directory outside it, e.g. ~/.dsh")
    return None


def _run_dirs(environ: Mapping[str, str], uid: int) -> list[tuple[Path, str]]:
    """Where the sandbox HOMEs, the spill files and the private ``/tmp`` of
    every session of this uid may live (canonical).  A location whose last
    part is a link is none of ours: dsh-sandbox never writes through one (a
    command may have planted it), so it holds nothing to hide, and its target
    (``/``, ``/etc``) is neither masked nor made."""
    # The recorded places were judged canonical directories of this uid a
    # moment ago (``state_places.recorded``): walking each again, on every
    # call of a run's planning, was most of the cost of a short run.
    judged = set(state_places.recorded(uid))
    return [(path if path in judged else canonical(path), holds) for path, holds in _raw_run_dirs(environ, uid)
            if path in judged or not os.path.islink(path)]


def _raw_run_dirs(environ: Mapping[str, str], uid: int, *, recorded: bool = True) -> list[tuple[Path, str]]:
    """``_run_dirs`` as the environment names them, links not followed: not
    only where this environment puts them, but wherever a session started with
    another one (a cron job without ``XDG_RUNTIME_DIR``, a shell with another
    ``HOME``) would, so that each run hides them all."""
    out: list[tuple[Path, str]] = []
    home = user_home(environ)
    caches = [cache_base(environ), home / ".cache" if home is not None else None, _password_cache()]
    for cache in dict.fromkeys(c for c in caches if c is not None):
        out.append((cache / "dsh-sandbox", "every workspace's sandbox HOME, spill files and private /tmp"))
    login = f"{LOGIN_RUNTIME}/{uid}"
    runtimes = [runtime_dir(environ), Path(login) if _private_dir(login) else None]
    for runtime in dict.fromkeys(r for r in runtimes if r is not None):
        out.append((runtime / "dsh-sandbox", "spill files and every session's private /tmp"))
    out.append((Path(f"/var/tmp/dsh-sandbox-{uid}"), "spill files"))
    out.append((Path(f"/var/tmp/dsh-sandbox-tmp-{uid}"), "every session's private /tmp"))
    if not recorded:
        return out
    named = {path for path, _holds in out}
    for place in state_places.recorded(uid):
        if place not in named:
            out.append((place, "the sandbox HOMEs, spill files and private /tmp of a session started with "
                               "another environment"))
    return out


def record_state_places(environ: Mapping[str, str] = os.environ) -> None:
    """Tell the other sessions of this uid where this environment keeps its state."""
    uid = os.geteuid()
    state_places.record([path for path, _holds in _raw_run_dirs(environ, uid, recorded=False)
                         if path.name == state_places.STATE_NAME], uid)


def _password_cache() -> Path | None:
    home = _password_home()
    return home / ".cache" if home is not None else None


def state_dirs(environ: Mapping[str, str] = os.environ, uid: int | None = None) -> tuple[tuple[Path, str], ...]:
    """The directories of dsh-sandbox's own state (canonical, existing or not), each with what it holds."""
    out = list(run_state_dirs(environ, uid))
    for base in (environ.get("XDG_CONFIG_HOME", ""), os.path.join(environ.get("HOME", ""), ".config")):
        if os.path.isabs(base):
            out.append((canonical(Path(base) / "dsh-sandbox"), "the configuration"))
    return tuple(dict.fromkeys(out))


def run_state_dirs(environ: Mapping[str, str] = os.environ, uid: int | None = None) -> tuple[tuple[Path, str], ...]:
    """The state that runs write, or the host writes for them (sandbox HOMEs,
    spill files, private ``/tmp``, the escalation log): ``state_dirs`` without
    the user's configuration, which no run may write."""
    out = _run_dirs(environ, os.geteuid() if uid is None else uid)
    log_dir = dsh_home(environ)
    if log_dir is not None and not os.path.islink(log_dir):
        out.append((canonical(log_dir), "the escalation log"))
    return tuple(dict.fromkeys(out))


def state_parents(kept: Iterable[Path | str], environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The directories of dsh-sandbox's run state (each that exists) and those
    that lead to what a run keeps (``kept``: its HOME, its private /tmp, its
    roots).  Their other entries are hidden, and so must be any entry made in
    them after the run started (another session's /tmp, a new workspace's HOME,
    a spill directory): a runner masks each whole, whatever it holds at the
    start, and binds what the run keeps again on top."""
    # Every existing directory of run state is masked, even one that leads to
    # nothing kept (a spill directory): a session may fill it during the run.
    out: set[str] = {str(top) for top, _holds in run_state_dirs(environ) if os.path.isdir(top)}
    paths = [Path(p) for p in kept]
    for top, _holds in state_dirs(environ):
        for path in paths:
            if path == top or not is_within(path, top):
                continue
            parent = path.parent
            while is_within(parent, top):
                out.add(str(parent))
                if parent == top:
                    break
                parent = parent.parent
    return frozenset(out)


def state_refusal(root: Path, own: Iterable[Path] = (), environ: Mapping[str, str] = os.environ) -> str | None:
    """Why ``root`` (canonical) overlaps dsh-sandbox's own state, or ``None``.

    ``own``: directories the policy keeps for this run (its sandbox HOME),
    which may be roots although they lie inside the state.
    """
    if root in set(own):
        return None
    for state, holds in state_dirs(environ):
        if is_within(root, state):
            return f"it is inside {state}, which holds {holds} of dsh-sandbox"
        if is_within(state, root):
            return f"it contains {state}, which holds {holds} of dsh-sandbox"
    return None


def hidden_state(keep: Iterable[Path], environ: Mapping[str, str] = os.environ) -> list[Path]:
    """What a run must not read of dsh-sandbox's state: every entry of the
    HOME and spill directories (other workspaces' HOMEs, every session's spill
    files), except the paths in ``keep`` (the run's own HOME and roots) and
    the directories leading to them; and the escalation log and the record
    of denied runs."""
    # ``canonical``: a root swapped for a link meanwhile is a clean refusal, not realpath's OSError.
    kept = frozenset(str(canonical(p)) for p in keep)
    _make_state_dirs(kept, environ)
    log_dir = dsh_home(environ)
    logs = tuple(str(log_dir / name) for name in LOG_FILES) if log_dir is not None else ()
    bases = tuple(str(base) for base, _holds in _run_dirs(environ, os.geteuid()))
    key = (kept, bases, logs)
    cached = _LISTED.get(key)
    # This runs at every resolve, over as many entries as there are
    # workspaces: a listing is reused while no directory it read has changed.
    if cached is not None and all(_stamp(d) == stamp for d, stamp in cached[0]):
        return list(cached[1])
    read: list[str] = []
    found = [entry for base in bases for entry in _hide_beneath(base, kept, read)]
    found += [os.path.realpath(log) for log in logs if os.path.lexists(log) and not os.path.islink(log)]
    result = tuple(dict.fromkeys(map(Path, found)))
    stamps = tuple((d, _stamp(d)) for d in (*bases, *read, *logs))
    if len(_LISTED) > 64:
        _LISTED.clear()
    _LISTED[key] = (stamps, result)
    return list(result)


def _make_state_dirs(kept: frozenset[str], environ: Mapping[str, str]) -> None:
    """Each missing directory of run state, made now (empty, 0700): a runner
    can only mask a directory that exists when the command starts, and another
    session may fill it during the run (its private /tmp, its spill files, the
    escalation log).  Never inside or around what the run keeps (a root: that
    is refused elsewhere); a directory that cannot be made stays unmasked.
    Made by the names the environment gives, through the walk that refuses a
    link a command could have planted: never where such a link points."""
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.own_dirs import open_own_dir

    roots = [Path(k) for k in kept]
    # Only the places this environment names: a place another session
    # recorded is hidden while it exists, never made again once it is gone
    # (the list is judged at most once a second, so it may still name a
    # place removed a moment ago).
    wanted = _raw_run_dirs(environ, os.geteuid(), recorded=False)
    log_dir = dsh_home(environ)
    if log_dir is not None:
        wanted.append((log_dir, "the escalation log"))
    for top, holds in wanted:
        real = canonical(top)
        if os.path.lexists(top) or any(is_within(real, r) or is_within(r, real) for r in roots):
            continue
        try:
            open_own_dir(top, f"the directory of {holds}", "it is not masked in this run").close()
        except DshError:
            continue


_Stamp = tuple[int, int, int] | None
_ListingKey = tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]
_LISTED: dict[_ListingKey, tuple[tuple[tuple[str, _Stamp], ...], tuple[Path, ...]]] = {}


def _stamp(path: str) -> _Stamp:
    """What changes when entries are made or removed in a directory (its mtime,
    its link count: HOMEs and spill sessions are directories) or when it is
    replaced (its inode); ``None`` if missing."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_nlink, info.st_ino


def _hide_beneath(directory: str, kept: frozenset[str], read: list[str], listed: bool = False) -> Iterator[str]:
    """``directory`` itself, or (when it leads to a kept path) its entries but
    the kept ones (``read`` collects the directories listed); ``listed``: it
    came from a listing, so it exists."""
    if directory in kept:
        return
    prefix = directory + os.sep
    if not any(k.startswith(prefix) for k in kept):
        if listed or os.path.lexists(directory):
            yield directory
        return
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries]
    except OSError:
        return  # unlistable by us: nothing there was made by this user's runs
    read.append(directory)
    for name in names:
        yield from _hide_beneath(prefix + name, kept, read, True)
