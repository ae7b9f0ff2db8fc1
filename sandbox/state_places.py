"""Where the other sessions of this uid keep their state, whatever their environment.

Each run hides every place a session of its uid could keep sandbox HOMEs,
spill files and private ``/tmp`` (``own_state``), but it can only derive those
places from its own environment and the password database.  A session started
with another ``HOME``, ``XDG_CACHE_HOME`` or ``XDG_RUNTIME_DIR`` (an agent
harness, a cron job) keeps them where no other environment points, and its
HOMEs (a ``.git-credentials`` there) would be readable by every other run.

So every session writes where its own state lives into one list per uid,
``/var/tmp/dsh-sandbox-<uid>/state-places``, and every run hides what the list
names too.  That directory is dsh-sandbox's own (made 0700, reached without
following a link a command could have planted, hidden from every run, never a
writable root), so no sandboxed command can add or remove an entry.  An entry
counts only when it still is a directory of this uid named ``dsh-sandbox``
(not a link): the list can make a run hide more of the user's own state,
never anything else.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from dsh.sandbox.errors import DshError
from dsh.sandbox.own_dirs import append_to, open_own_dir, replace_file
from dsh.sandbox.policy_paths import is_within

LIST_NAME = "state-places"
#: Far more than the places one user's sessions use; a longer list is read no further.
MAX_BYTES = 64 * 1024
#: A list this long is rewritten without the places that are gone (test
#: suites make many short-lived caches) when a new one is added.
PRUNE_AT = 32
_LABEL = "the list of dsh-sandbox's state places"
_FIX = "make /var/tmp writable to you"
#: The last part of every place a session keeps its state in.
STATE_NAME = "dsh-sandbox"

#: How long a judged list is trusted for an unchanged file.
RECHECK_S = 1.0

_cache: dict[int, tuple[tuple[int, int, int, int], tuple[Path, ...]]] = {}
_judged: dict[int, tuple[tuple[str, ...], float, tuple[Path, ...]]] = {}
_lock = threading.Lock()


def list_path(uid: int) -> Path:
    return Path(f"/var/tmp/dsh-sandbox-{uid}") / LIST_NAME


def recorded(uid: int) -> tuple[Path, ...]:
    """The places other sessions of ``uid`` recorded that still are state
    directories of ``uid`` (canonical, not links).

    Judged at most once per ``RECHECK_S`` for an unchanged list: a run asks
    many times while it plans, and each entry costs a walk of its path."""
    lines = _read_lines(uid)
    now = time.monotonic()
    with _lock:
        memo = _judged.get(uid)
    if memo is not None and memo[0] == lines and now - memo[1] < RECHECK_S:
        return memo[2]
    out = _judge(lines, uid)
    with _lock:
        _judged[uid] = (lines, now, out)
    return out


def _judge(lines: tuple[str, ...], uid: int) -> tuple[Path, ...]:
    out = []
    for line in lines:
        place = Path(line)
        if not place.is_absolute() or place.name != STATE_NAME or os.path.realpath(place) != line:
            continue
        try:
            info = os.lstat(place)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            out.append(place)
    return tuple(dict.fromkeys(out))


def record(places: Iterable[Path], uid: int | None = None) -> None:
    """Add ``places`` (this session's state directories, existing or not) to
    the list.  Best effort: a list that cannot be written leaves this session's
    state hidden only from runs whose environment points at it too.

    A place in the shared ``/tmp`` or ``$TMPDIR`` is not listed: a session
    keeping its state there shares it with every run that sees that directory
    (``tmp = "shared"``, landlock) anyway, and listing it would refuse every
    later ``tmp = "shared"`` run for as long as it exists."""
    uid = os.geteuid() if uid is None else uid
    known = set(_read_lines(uid))
    shared = [Path(os.path.realpath(t)) for t in ("/tmp", os.environ.get("TMPDIR")) if t]
    new = [str(p) for p in dict.fromkeys(places)
           if p.is_absolute() and p.name == STATE_NAME and str(p) not in known and "\n" not in str(p)
           and not any(is_within(p, t) for t in shared)]
    if not new:
        return
    with contextlib.suppress(OSError, DshError):
        if len(known) >= PRUNE_AT:
            _rewrite(uid, [*(str(p) for p in recorded(uid)), *new])
            return
        append_to(list_path(uid), _LABEL, _FIX, ("\n".join(new) + "\n").encode("utf-8", "surrogateescape"))


def _rewrite(uid: int, lines: list[str]) -> None:
    """Replace the list by ``lines`` (the places that still exist, and the new
    ones): written beside it and renamed over it, from the directory's fd.  An
    entry another session appends meanwhile is lost until its next start."""
    path = list_path(uid)
    own = open_own_dir(path.parent, _LABEL, _FIX, narrow=False)
    try:
        replace_file(own, path.name, ("\n".join(dict.fromkeys(lines)) + "\n").encode("utf-8", "surrogateescape"))
    finally:
        own.close()


def _read_lines(uid: int) -> tuple[str, ...]:
    path = list_path(uid)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return ()
    try:
        info = os.fstat(fd)
        # Only a regular file of this uid that nobody else may write.
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
            return ()
        key = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        with _lock:
            cached = _cache.get(uid)
        if cached is not None and cached[0] == key:
            return tuple(str(p) for p in cached[1])
        data = os.read(fd, MAX_BYTES)
    except OSError:
        return ()
    finally:
        os.close(fd)
    lines = tuple(dict.fromkeys(line for line in data.decode("utf-8", "surrogateescape").splitlines() if line))
    with _lock:
        _cache[uid] = (key, tuple(Path(line) for line in lines))
    return lines
