"""How one exact argv becomes an envd ``ProcessConfig``, and how its end maps back.

The SDK's ``commands.run(cmd)`` always starts ``/bin/bash -l -c <cmd>``: a
*login* shell that sources ``/etc/profile`` and ``~/.bash_profile`` /
``~/.profile`` before the command (and a sandboxed command can write the
latter, changing every later command).  So the runner does not use
``commands.run`` for commands; it sends envd's ``Start`` itself (same RPC
client, same headers) with this process config::

    setsid -w [prlimit --nproc=N --as=M --fsize=F --] /bin/sh -c 'set -- <shlex.join(argv)>; <check>; exec "$@"'

with ``DSH_E2B_RUN=<token>`` added to the environment (see ``tree_kill_script``).

- ``/bin/sh -c``: a non-login, non-interactive shell: it reads no startup file
  (``ENV`` and ``BASH_ENV`` are never passed), and the argv arrives as one
  ``shlex.join``ed string, so every argument is exactly one word; ``exec``
  makes the shell become the command (same pid, its own exit status or
  signal).  An argv[0] that starts with ``-`` is taken as a command name by
  dash's ``exec`` (bash's would read it as an option).  The check before it
  (``EXEC_CHECK_SH``) gives a program that cannot be executed the same message
  and status (127/126) as on every other runner.  Arguments
  that are not UTF-8 cannot travel in envd's JSON strings; each such argument is
  rebuilt in the sandbox from octal escapes (``printf``) into a shell variable.
- ``setsid``: envd starts the process in *its* process group and ``SendSignal``
  signals only that process.  ``setsid`` makes the command a new session and
  process-group leader whose id is the pid envd reports, so the runner can
  signal the whole tree with ``kill -- -PID`` (``-w``: should setsid ever have
  to fork, it waits for the child so the stream still ends with the command).
- ``prlimit``: the profile's process, memory and file-size limits.

envd itself wraps this once more (``/bin/sh -c 'echo 100 > oom_score_adj &&
exec nice ... "$@"'``): that wrapper execs, so pids and exit statuses are the
command's.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Mapping

from dsh.sandbox.errors import UsageError
from dsh.sandbox.policy import ResourceLimits
from dsh.sandbox.runner import EXEC_CHECK_SH, Argv, ExitStatus
from dsh.sandbox.sandbox_home import HOME_ENV_NAMES

# Host facts that are wrong inside the sandbox (envd sets HOME, USER, LOGNAME
# and PATH for the sandbox user) or that would make the shell read a file.
# The sandbox home's variables name host directories: the remote user's own
# home (writable there) serves instead.
HOST_ONLY_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TMPDIR", "MAIL",
    "HOSTNAME", "ENV", "BASH_ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "XDG_RUNTIME_DIR",
}) | HOME_ENV_NAMES

# Set in every command's environment (a fresh token each): how the runner finds
# the processes a command started, even those that left its process group.
RUN_MARKER = "DSH_E2B_RUN"

# Go's syscall.Signal.String() names, as envd reports them ("signal: killed").
_GO_SIGNAL_NAMES = {
    "hangup": signal.SIGHUP, "interrupt": signal.SIGINT, "quit": signal.SIGQUIT,
    "illegal instruction": signal.SIGILL, "trace/breakpoint trap": signal.SIGTRAP,
    "aborted": signal.SIGABRT, "bus error": signal.SIGBUS,
    "floating point exception": signal.SIGFPE, "killed": signal.SIGKILL,
    "user defined signal 1": signal.SIGUSR1, "segmentation fault": signal.SIGSEGV,
    "user defined signal 2": signal.SIGUSR2, "broken pipe": signal.SIGPIPE,
    "alarm clock": signal.SIGALRM, "terminated": signal.SIGTERM,
}


def shell_script(argv: Argv) -> str:
    """``set -- <shlex.join(argv)>; <check>; exec "$@"``, with non-UTF-8 arguments rebuilt from octal escapes."""
    if not argv:
        raise UsageError("e2b runner: empty argv; give the command to run")
    prelude: list[str] = []
    words: list[str] = []
    for index, arg in enumerate(argv):
        raw = arg if isinstance(arg, bytes) else arg.encode("utf-8", "surrogateescape")
        if b"\0" in raw:
            raise UsageError(f"e2b runner: argv[{index}] contains a NUL byte, which no argv can carry")
        try:
            words.append(shlex.quote(raw.decode("utf-8")))
        except UnicodeDecodeError:
            var = f"_dsh_arg{index}"
            octal = "".join(f"\\{byte:03o}" for byte in raw)
            # The trailing x keeps trailing newlines that $(...) would strip.
            prelude.append(f"{var}=$(printf '{octal}x'); {var}=${{{var}%x}}")
            words.append(f'"${var}"')
    # `exec`: the shell becomes the command, so its pid, signals and exit status
    # are the command's own (dash would otherwise report a signal as 128+N).
    # A program that cannot be executed gets the local executor's message and status.
    run = "set -- " + " ".join(words) + "; " + EXEC_CHECK_SH + 'exec "$@"'
    return "; ".join([*prelude, run])


def process_argv(script: str, limits: ResourceLimits) -> list[str]:
    """The envd ``cmd`` + ``args`` for one command (see the module docstring)."""
    argv = ["setsid", "-w"]
    rlimits = []
    if limits.max_processes is not None:
        rlimits.append(f"--nproc={limits.max_processes}")
    if limits.max_memory_bytes is not None:
        rlimits.append(f"--as={limits.max_memory_bytes}")
    if limits.max_file_size_bytes is not None:
        rlimits.append(f"--fsize={limits.max_file_size_bytes}")
    if rlimits:
        argv += ["prlimit", *rlimits, "--"]
    return [*argv, "/bin/sh", "-c", script]


def pty_process_argv(script: str, limits: ResourceLimits) -> list[str]:
    """The envd ``cmd`` + ``args`` of a terminal session on envd's pty.

    No ``setsid``: envd's pty start already makes the command lead a new
    session (and so its own process group) with the pty as its controlling
    terminal; ``setsid`` would fork (the command leads a group) and start a
    session *without* a terminal."""
    return process_argv(script, limits)[2:]


def remote_env(env: Mapping[str, str]) -> dict[str, str]:
    """The executor's environment minus what only makes sense on this host, and
    minus variables that are not valid UTF-8 (envd's JSON cannot carry them)."""
    return {k: v for k, v in env.items()
            if k and k not in HOST_ONLY_ENV and "=" not in k and _utf8(k) and _utf8(v)}


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def tree_kill_script(pid: int, sig: int, token: str, *, group: bool, session: bool = False) -> str:
    """Signal everything one command started.

    - ``group`` (while the command's leader runs): its process group, which
      ``setsid`` made it lead, else the pid itself;
    - always: every process whose environment carries the command's
      ``RUN_MARKER`` token: what left the group (``setsid`` daemons, double
      forks, SIGTERM-ignorers orphaned by their parent) still has it.  After
      the leader ended only the token is used, so a reused pid is never hit.
    - ``session`` with ``group`` (a terminal session, whose leader envd made
      lead a session): every process of that session too, job-control groups
      and programs that dropped the token from their environment included.
      Only while the leader runs, like the group: its pid then names nothing else.
    """
    if not token.isalnum():
        raise ValueError(f"bad run token {token!r}")
    lines = []
    if group:
        lines.append(f"kill -s {int(sig)} -- -{int(pid)} 2>/dev/null || "
                     f"kill -s {int(sig)} {int(pid)} 2>/dev/null")
    if group and session:
        lines.append(
            f"for f in /proc/[0-9]*/stat; do set -- $(sed 's/^.*) //' \"$f\" 2>/dev/null); "
            f"[ \"${{4:-}}\" = {int(pid)} ] || continue; p=${{f#/proc/}}; "
            f"kill -s {int(sig)} \"${{p%/stat}}\" 2>/dev/null; done")
    lines.append(
        f"for f in $(grep -lzx '{RUN_MARKER}={token}' /proc/[0-9]*/environ 2>/dev/null); do "
        f"p=${{f#/proc/}}; kill -s {int(sig)} \"${{p%/environ}}\" 2>/dev/null; done")
    return "\n".join([*lines, "true"])


def exit_status(exit_code: int, status: str | None, error: str | None) -> ExitStatus:
    """Map envd's end event (Go's ProcessState) to an ``ExitStatus``.

    A process killed by a signal ends with exit code -1 and ``"signal: killed"``
    (this is also one of the two shapes a timeout takes).
    """
    if exit_code >= 0:
        return ExitStatus(exit_code)
    for text in (error, status):
        if text and text.startswith("signal: "):
            name = text.removeprefix("signal: ").strip()
            if name in _GO_SIGNAL_NAMES:
                return ExitStatus(None, int(_GO_SIGNAL_NAMES[name]))
            if name.startswith("signal ") and name[7:].isdigit():
                return ExitStatus(None, int(name[7:]))
    # -1 without a signal name: envd could not tell; report a kill, never success.
    return ExitStatus(None, int(signal.SIGKILL))
