"""What a runner's ``wrap`` hands back, and what the executor drives: a local
argv with its spawn hooks (``LocalLaunch``), or a process-like handle of a
command running elsewhere (``RemoteLaunch`` -> ``RemoteProcess``); the exit
status they report and the shell's conventions for a command that could not
start."""

from __future__ import annotations

import abc
import errno
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dsh.sandbox.stdin_feed import StdinFeed


@dataclass(frozen=True)
class ExitStatus:
    exit_code: int | None
    signal: int | None = None


#: Exit statuses of a command that could not be started, as a shell, ``env``
#: and ``docker run`` report them: found but not executable (a directory, no
#: execute permission, not a format the kernel runs), and not found.
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


def exec_failure_status(err: int) -> int:
    """The shell's exit status for an ``execve`` that failed with ``err``."""
    return EXIT_NOT_FOUND if err == errno.ENOENT else EXIT_NOT_EXECUTABLE


#: POSIX sh (dash) run just before ``exec "$@"`` by runners that start the
#: command through a shell inside the sandbox: a program that cannot be
#: executed gets the one message and status the local executor gives
#: (``dsh-sandbox: x: command not found``, 127; 126 for a directory or a file
#: without execute permission), not the shell's or bwrap's own wording.  The
#: lookup is the sandbox's own (its PATH, its filesystem); builtins only.
EXEC_CHECK_SH = (
    "case $1 in "
    "*/*) if [ ! -e \"$1\" ]; then "
    "printf 'dsh-sandbox: %s: No such file or directory\\n' \"$1\" >&2; exit 127; "
    "elif [ -d \"$1\" ] || [ ! -x \"$1\" ]; then "
    "printf 'dsh-sandbox: %s: Permission denied\\n' \"$1\" >&2; exit 126; fi;; "
    "*) _dsh_found=; _dsh_ifs=$IFS; IFS=:; set -f; "
    "for _dsh_d in ${PATH-}; do if [ -f \"${_dsh_d:-.}/$1\" ] && [ -x \"${_dsh_d:-.}/$1\" ]; then "
    "_dsh_found=1; break; fi; done; IFS=$_dsh_ifs; set +f; "
    "if [ -z \"$_dsh_found\" ]; then printf 'dsh-sandbox: %s: command not found\\n' \"$1\" >&2; exit 127; fi;; "
    "esac; "
)


@dataclass(frozen=True)
class LocalLaunch:
    """A local argv to spawn, plus what the spawn needs from the runner.

    - ``spawn_in``: runs the spawn callable inside the runner's restricted
      context (for Landlock: a thread that has applied the ruleset, no_new_privs
      and seccomp).  ``None`` means spawn normally.
    - ``env``: variables the runner adds (after the executor's env layering).
    - ``spawn_env``: when set, the whole environment ``argv[0]`` starts with
      instead of the command's: ``argv`` begins with host-side helpers, which
      must not see the command's variables (``dsh.sandbox.helper_env``), and
      the runner hands the command its own environment (``env`` of
      ``prepare``, plus ``env`` above) through the last hop.
    - ``kill_tree``: kills everything the command started (e.g. a cgroup);
      ``None`` means the subprocess service kills the process group and tree.
    - ``cleanup``: called once the process is reaped.
    - ``exit_status``: the command's status from the wrapper's, given a
      reader of the retained stderr (bwrap exits 1 when it cannot ``execve`` the command: that
      becomes 126/127 as a shell reports it, a failure of the runner itself
      becomes ``ExitStatus(None)``: not started).  ``None``: taken as it is.
    """

    argv: tuple[str | bytes, ...]
    spawn_in: Callable[[Callable[[], Any]], Any] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    spawn_env: Mapping[str, str] | None = None
    pass_fds: tuple[int, ...] = ()
    kill_tree: Callable[[int, int], None] | None = None  # (pid, signal)
    cleanup: Callable[[], None] | None = None
    exit_status: Callable[[ExitStatus, Callable[[], bytes]], ExitStatus] | None = None


class RemoteProcess(abc.ABC):
    """A process running somewhere else (container, remote sandbox).

    ``stdout_fd`` / ``stderr_fd`` are read ends of OS pipes the runner writes
    into and closes at EOF; the subprocess service reads and closes them.
    """

    stdout_fd: int
    stderr_fd: int

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> ExitStatus | None:
        """Block until exit (or ``timeout`` seconds); ``None`` if still running."""

    @abc.abstractmethod
    def kill(self, sig: int) -> None:
        """Send ``sig`` to the whole process tree of this command in the sandbox."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources once the process is done."""


@dataclass(frozen=True)
class RemoteLaunch:
    """A launch whose ``start`` creates a ``RemoteProcess``.

    ``stdin`` is bytes written once, or a ``StdinFeed`` to stream (a feeder
    thread takes its chunks and closes the command's stdin at its EOF).
    ``start(stdin, deadline)`` may block for preparation (syncing a workspace);
    ``deadline`` is a ``time.monotonic()`` value or ``None``, and preparation
    time counts against it.
    """

    start: Callable[[bytes | StdinFeed | None, float | None], RemoteProcess]
    cleanup: Callable[[], None] | None = None


Launch = LocalLaunch | RemoteLaunch
