"""What the daemon binds at a missing protected path: one empty directory of the runner's own.

A missing protected path (``.dsh``, a profile's protected name) is held on the
host by a placeholder, an empty directory made in the pinned workspace so that
the container has a mount point there.  The daemon is not given the
placeholder's own name as the bind's source: it resolves a source by name when
the container starts, and a command that can write the workspace's parent may
swap the workspace for a symlink at that moment.  runc then binds the link's
target at the workspace, makes the mount points of the nested mounts in it
(outside every root), and fails on the next source that no longer exists, with
no container left through which to find and take back what it made.

An empty directory in the runner's private state directory, which no
sandboxed command can reach, cannot vanish so: such a start goes on, the bind
check refuses the container, and ``strays`` takes back what runc made.
Inside the container the path is the same empty, read-only directory.
"""

from __future__ import annotations

import contextlib
import os
import stat

from dsh.sandbox.errors import SandboxUnavailable

NAME = "empty-placeholder-source"
#: Read-only even before it is bound read-only: nothing of this user's writes into it by mistake.
MODE = 0o555
_FIX = "set XDG_RUNTIME_DIR to a private directory (mode 0700) of yours"


def empty_source() -> str:
    """The path of the runner's empty read-only directory, made if missing.

    Refuses (naming the path and the fix) when something else is there: a
    link, a file, a directory that is not empty or not read-only."""
    from dsh.sandbox.own_dirs import first_own_dir
    from dsh.sandbox.own_state import runner_state_candidates

    label = "the docker runner's directory"
    own, tried = first_own_dir(runner_state_candidates("docker", os.environ, os.geteuid()), label, _FIX)
    if own is None:
        raise SandboxUnavailable(f"no private directory for the empty source of placeholders: tried "
                                 f"{'; '.join(tried)}; {_FIX}", runner="docker")
    path = own.path / NAME
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(NAME, MODE, dir_fd=own.fd)
            set_mode(NAME, MODE, own.fd)
        try:
            fd = os.open(NAME, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=own.fd)
        except OSError as exc:
            raise SandboxUnavailable(f"{path} is not the directory the runner made ({exc.strerror}): remove it "
                                     f"(rm -rf {path}) and retry", runner="docker") from None
        try:
            info, entries = os.fstat(fd), os.listdir(fd)
            if info.st_uid != os.geteuid() or entries:
                raise SandboxUnavailable(f"{path} must be an empty directory of yours (it stands for missing "
                                         f"protected paths in containers): remove it (rm -rf {path}) and retry",
                                         runner="docker")
            if stat.S_IMODE(info.st_mode) != MODE:
                # Only its mode changed (a run granted chmod by an accepted degradation): set it back.
                os.fchmod(fd, MODE)
        finally:
            os.close(fd)
    finally:
        own.close()
    return str(path)


def set_mode(name: str, mode: int, dir_fd: int | None) -> None:
    """``chmod`` of the directory just made as ``name`` (the umask may have
    cleared bits), never through a link swapped in since."""
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
