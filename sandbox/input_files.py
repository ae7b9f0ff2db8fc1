"""Reading the files that configure a sandbox, and checking the strings that name things.

Profiles (and the files they extend), approval rules, compositions and config
files are named by people and sometimes by whoever wrote a repository.  Each
is resolved once to a descriptor (``O_PATH`` where there is one), checked on
it (a regular file, at most ``MAX_INPUT_BYTES``) before it is opened for
reading, then read from that same file, without blocking and without
acquiring a terminal: ``/dev/zero`` cannot exhaust memory, a FIFO cannot hang
the CLI, a device is never opened, and the real path any later check judges
(e.g. "not inside a writable root") is the one of the file that was read, not
of whatever the name points at a moment later.

A file with more than one hard link is refused: its other name may be
inside a writable root, and nothing here can tell where the names are.

Symbolic links to an input file are followed (dotfile managers link
``~/.config``): what is trusted is the file's content, and that is judged by
the real path of the opened file.  A caller that must not follow a link at
the last component (the project's own ``.dsh/config.toml``) asks for
``nofollow``.

Every string that names a path, or ends up in one, is checked for NUL bytes
and for the kernel's limits (a component over ``NAME_MAX`` bytes, a path
over ``PATH_MAX``) before it is used, so a bad value is a ``ConfigError``
naming where it came from, never an ``OSError`` traceback.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from dsh.sandbox.errors import ConfigError

#: No profile, rules file, composition or config file is anywhere near this.
MAX_INPUT_BYTES = 1024 * 1024
#: The kernel's limits on Linux (and at least as strict as macOS's).
NAME_MAX = 255
PATH_MAX = 4096
#: A value that is not a path (a description, an image name) is still bounded.
MAX_TEXT = 4096

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(ConfigError):
    """An input file cannot be used; ``problem`` and ``fix`` let the caller
    phrase it in its own terms (``profile FILE: ...``, ``FILE:LINE: ...``)."""

    code = "INPUT_FILE_INVALID"

    def __init__(self, path: str, problem: str, fix: str) -> None:
        super().__init__(f"{path}: {problem}; {fix}")
        self.path = path
        self.problem = problem
        self.fix = fix
        #: ``errno.ENOENT`` for a missing file, so callers can word that case.
        self.missing = False


@dataclass(frozen=True)
class InputFile:
    """One file read whole: ``path`` as named, ``real`` the opened file's real path."""

    path: str
    real: str
    text: str
    uid: int
    mode: int


def path_problem(value: str) -> str | None:
    """Why ``value`` cannot be a path on this system, or ``None``."""
    if "\0" in value:
        return "contains a NUL byte"
    encoded = os.fsencode(value)
    if len(encoded) >= PATH_MAX:
        return f"is {len(encoded)} bytes long, over the {PATH_MAX - 1}-byte limit for a path"
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            shown = os.fsdecode(part[:24]) + "..."
            return f"has a component of {len(part)} bytes ({shown}), over the {NAME_MAX}-byte limit for a name"
    return None


def check_path(label: str, value: str, fix: str = "shorten it or fix the value") -> str:
    """``value`` if it can name a path, else a ``ConfigError`` naming ``label``."""
    problem = path_problem(value)
    if problem is not None:
        raise ConfigError(f"{label}: {problem}; {fix}")
    return value


def text_problem(value: str, *, limit: int = MAX_TEXT) -> str | None:
    """Why ``value`` cannot be a setting's text (a name, an image), or ``None``."""
    if "\0" in value:
        return "contains a NUL byte"
    if len(value) > limit:
        return f"is {len(value)} characters long, over the {limit}-character limit"
    return None


def check_text(label: str, value: str, fix: str = "remove the NUL byte or shorten it") -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ConfigError(f"{label}: {problem}; {fix}")
    return value


def read_input_file(path: str, *, nofollow: bool = False, limit: int = MAX_INPUT_BYTES) -> InputFile:
    """Open ``path`` once and read it whole from that descriptor.

    ``InputFileError`` when it is missing, unreadable, not a regular file, over
    ``limit`` bytes, or not UTF-8; ``nofollow``: a link at the last component is
    refused too.
    """
    problem = path_problem(path)
    if problem is not None:
        raise InputFileError(path, problem, "fix the path")
    fd = _open_regular(path, nofollow, limit)
    try:
        st = os.fstat(fd)
        real = fd_real_path(fd, path)
        data = _read_bounded(fd, path, limit)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFileError(path, "is not UTF-8 text", "save it as UTF-8") from None
    return InputFile(path, real, text, st.st_uid, st.st_mode)


def _open_regular(path: str, nofollow: bool, limit: int) -> int:
    """A read descriptor on ``path``, which must be a regular file of at most ``limit`` bytes.

    The file is looked at before it is opened for reading: opening some
    devices for reading has effects of its own (a watchdog arms, a tape
    rewinds).  Where the system has ``O_PATH`` and ``/proc``, the descriptor
    that was checked is reopened through ``/proc/self/fd``, so the file read
    is the file checked; elsewhere the opened file must be the one checked.
    """
    follow = os.O_NOFOLLOW if nofollow else 0
    o_path = getattr(os, "O_PATH", 0)
    try:
        probe = os.open(path, (o_path or os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY) | os.O_CLOEXEC | follow)
    except OSError as exc:
        raise _open_error(path, exc, nofollow) from None
    try:
        st = os.fstat(probe)
        _check_regular(path, st, limit)
        if not o_path:
            return os.dup(probe)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(f"/proc/self/fd/{probe}", flags)
        except FileNotFoundError:
            fd = os.open(path, flags | follow)  # no /proc: the identity check below decides
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)
            raise InputFileError(path, "changed while it was being opened", "try again; if it keeps changing, "
                                 "something is rewriting it")
        return fd
    except OSError as exc:
        raise _open_error(path, exc, nofollow) from None
    finally:
        os.close(probe)


def _check_regular(path: str, st: os.stat_result, limit: int) -> None:
    if stat.S_ISLNK(st.st_mode):  # O_PATH | O_NOFOLLOW opens the link itself
        raise InputFileError(path, "is a symbolic link", "replace the link with the file itself")
    if not stat.S_ISREG(st.st_mode):
        kind = next((word for test, word in _KINDS if test(st.st_mode)), "not a regular file")
        raise InputFileError(path, f"is {kind}, not a regular file", "name the .toml file itself")
    if st.st_nlink > 1:
        # Another name of the same file may lie inside a writable root, where a
        # sandboxed command rewrites it; where the other names are cannot be
        # told from here, so no hard-linked file configures a sandbox.
        raise InputFileError(path, f"has {st.st_nlink} hard links (another name for it may be inside a "
                             "writable root, where a sandboxed command could rewrite it)",
                             f"give it a name of its own: cp {path} {path}.new && mv {path}.new {path}")
    if st.st_size > limit:
        raise InputFileError(path, f"is {st.st_size} bytes, over the {_mib(limit)} limit for this file",
                             "name the right file; no configuration is this large")


def fd_real_path(fd: int, name: str) -> str:
    """The real path of the file open on ``fd`` (``name`` only where the system
    cannot say: then resolved by name)."""
    if sys.platform.startswith("linux"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            link = ""
        if link.startswith("/") and not link.endswith(" (deleted)"):
            return link
    if sys.platform == "darwin":  # pragma: no cover - macOS only
        import fcntl

        try:
            raw = fcntl.fcntl(fd, 50, b"\0" * 1024)  # F_GETPATH
            return os.fsdecode(raw.split(b"\0", 1)[0])
        except OSError:
            pass
    return os.path.realpath(name)


def _read_bounded(fd: int, path: str, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = os.read(fd, min(65536, limit + 1 - total))
        except OSError as exc:
            raise InputFileError(path, f"cannot be read ({exc.strerror})", "check the file") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            # It grew after fstat, or fstat cannot tell (a /proc file).
            raise InputFileError(path, f"is over the {_mib(limit)} limit for this file",
                                 "name the right file; no configuration is this large")


def _open_error(path: str, exc: OSError, nofollow: bool) -> InputFileError:
    if exc.errno == errno.ELOOP and nofollow:
        return InputFileError(path, "is a symbolic link", "replace the link with the file itself")
    if exc.errno == errno.ENOENT:
        error = InputFileError(path, "file not found", "check the path")
        error.missing = True
        return error
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InputFileError(path, "cannot be read (permission denied)",
                              "check the file's permissions and those of its directories")
    if exc.errno == errno.ENAMETOOLONG:
        return InputFileError(path, "is too long a path", "shorten it")
    if exc.errno == errno.ENOTDIR:
        return InputFileError(path, "a component of the path is not a directory", "fix the path")
    return InputFileError(path, f"cannot be opened ({exc.strerror})", "check the path")


def _mib(limit: int) -> str:
    return f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


def open_private_file(path: Path, flags: int, dir_fd: int | None = None) -> int:
    """``path`` opened (created 0600) as a regular file and never through a
    symbolic link or as a terminal: a link a command planted there would
    have us append to a file of its choosing.  Never blocks on a FIFO.
    ``dir_fd``: ``path`` is a name in that directory."""
    extra = os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags | extra, 0o600, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd
