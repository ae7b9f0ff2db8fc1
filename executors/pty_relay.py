"""The terminal relay: the first process of a terminal session, started inside the sandbox.

It allocates the pseudo-terminal *inside* the sandbox (or takes the pair the
host opened, named by ``DSH_TTY_FDS``, where the sandbox cannot reach a
``/dev/ptmx``), starts the exact
argv on it as a new session with the pty as its controlling terminal, and
forwards over its stdio pipes: what arrives on stdin (framed) goes to the pty,
what the pty prints goes to stdout unchanged.  So job control, ``TIOCSTI`` and
everything else terminal-shaped happen on a terminal the sandbox owns, never on
one of the host's.

This file is run as ``python3 -I -S -c <this source>``: stdlib only, no
imports of the package (the sandbox may not be able to read it), no site.

Frames on stdin: one type byte, a 4-byte big-endian length, the payload:
``d`` bytes to type, ``w`` window size (rows, cols as two 16-bit numbers),
``k`` a signal number for the foreground process group, ``e`` end of input
(the pty gets EOF, ``^D``).  Status lines on stderr start with ``\\x1edsh-tty ``
and carry ``state <out-bytes> <reading:0|1> <frames> <shell:0|1>`` (the
foreground process group is, or is not, blocked reading the terminal after
``out-bytes`` bytes of output and ``frames`` input frames; it is, or is not,
the started program's own) and, last, ``exit <code> <signal>``.

The relay is a child subreaper: whatever the session starts (job-control
groups, ``setsid`` daemons, double forks) comes back to it, and it kills and
reaps all of it before it exits.  When its own stdin closes, or it is told to
stop (SIGTERM, SIGHUP), it hangs the session up and does the same.
"""

import errno
import fcntl
import os
import select
import signal
import struct
import sys
import termios
import time

_HDR = struct.Struct(">cI")
_MAX_FRAME = 1 << 20
_QUIET_S = 0.05
_DRAIN_S = 0.5
_MAX_PENDING = 1 << 16
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
# Syscalls a process waiting for terminal input sleeps in, by machine.
_WAITS = {
    "x86_64": {"read": 0, "readv": 19, "poll": 7, "select": 23, "pselect6": 270, "ppoll": 271},
    "aarch64": {"read": 63, "readv": 65, "pselect6": 72, "ppoll": 73},
}
_STATUS = b"\x1edsh-tty "


def _prctl(option, arg):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except Exception:
        pass


def _status(words):
    try:
        os.write(2, _STATUS + " ".join(str(w) for w in words).encode() + b"\n")
    except OSError:
        pass


def _winsize(fd, rows, cols):
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    except OSError:
        pass


def _children(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    out += [int(p) for p in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _descendants(pid):
    seen, todo = [], _children(pid)
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += _children(p)
    return seen


def _kill_all(me, child):
    """SIGKILL every descendant (they come back to us: subreaper) and reap them;
    the status of ``child`` if it was reaped here."""
    found = None
    give_up = time.monotonic() + 5
    while time.monotonic() < give_up:
        pids = _descendants(me)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            while True:
                got, raw = os.waitpid(-1, 0 if not pids else os.WNOHANG)
                if got == 0:
                    break
                if got == child:
                    found = raw
        except ChildProcessError:
            return found
        time.sleep(0.01)
    return found


def _unread(slave):
    try:
        return struct.unpack("i", fcntl.ioctl(slave, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def _reading(fg, tty_rdev, waits):
    """Whether a process of group ``fg`` sleeps in a syscall on the terminal."""
    try:
        pids = os.listdir("/proc")
    except OSError:
        return False
    for name in pids:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[2]) != fg:  # pgrp
                continue
            with open(f"/proc/{name}/syscall") as f:
                words = f.read().split()
        except (OSError, ValueError):
            continue
        if len(words) < 2 or not words[0].isdigit() or int(words[0]) not in waits.values():
            continue
        nr = int(words[0])
        if nr in (waits.get("read"), waits.get("readv")):
            try:
                if os.stat(f"/proc/{name}/fd/{int(words[1], 16)}").st_rdev == tty_rdev:
                    return True
            except (OSError, ValueError):
                pass
            continue
        # select/poll: the sets are behind pointers; a process whose stdin is
        # the terminal and that sleeps in one is taken as waiting for it.
        try:
            if os.stat(f"/proc/{name}/fd/0").st_rdev == tty_rdev:
                return True
        except OSError:
            pass
    return False


def _ready(rl, wl, timeout):
    """The fds of ``rl`` ready to read and of ``wl`` ready to write.

    poll, not select, where it works on a pty: the pair the host passes keeps
    its fd numbers, which may lie above FD_SETSIZE in a long-lived host
    process.  macOS's poll does not support terminal devices.  A hang-up or
    an error reads as readable, as select reports it: the read that follows
    sees the end."""
    if sys.platform == "darwin" or not hasattr(select, "poll"):
        r, w, _ = select.select(rl, wl, [], timeout)
        return set(r), set(w)
    poller = select.poll()
    for fd in dict.fromkeys(rl + wl):
        poller.register(fd, (select.POLLIN if fd in rl else 0) | (select.POLLOUT if fd in wl else 0))
    events = poller.poll(int(timeout * 1000))
    return {fd for fd, ev in events if ev & ~select.POLLOUT}, {fd for fd, ev in events if ev & select.POLLOUT}


def main(args):
    rows, cols = 24, 80
    # The host's pair arrives in the environment; the command must not see it.
    named = os.environ.pop("DSH_TTY_FDS", None)
    fds = tuple(int(x) for x in named.split(",")) if named else None
    while args and args[0] != "--":
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--rows":
            rows = int(value)
        elif flag == "--cols":
            cols = int(value)
    argv = args[1:]
    if not argv:
        os.write(2, b"dsh-tty: no command\n")
        return 2
    if fds is None:
        try:
            master, slave = os.openpty()
        except OSError as exc:
            os.write(2, f"dsh-tty: cannot allocate a terminal here: {exc.strerror}\n".encode())
            return 126
    else:
        master, slave = fds
    _winsize(slave, rows, cols)
    tty_rdev = os.fstat(slave).st_rdev
    me = os.getpid()
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    r, w = os.pipe()  # exec failure report
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != me:
                os._exit(126)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE,
                        signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
                signal.signal(sig, signal.SIG_DFL)
            fcntl.fcntl(w, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(w, struct.pack(">i", exc.errno or 0))
        os._exit(127)
    os.close(w)
    # The relay keeps the slave open to see whether typed input still waits
    # there: a program is only "reading" once it has taken what was typed.
    failure = os.read(r, 4)
    os.close(r)
    if failure:
        err = struct.unpack(">i", failure)[0]
        os.write(2, f"dsh-tty: {argv[0]}: {os.strerror(err)}\n".encode())
        os.waitpid(pid, 0)
        code = 127 if err == errno.ENOENT else 126
        _status(("exit", code, 0))
        return code
    stop = []
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda s, f: stop.append(s))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    waits = _WAITS.get(os.uname().machine, {})
    os.set_blocking(master, False)
    pending = b""
    to_pty = b""
    stdin_open = True
    out_total = 0
    frames = 0
    last_out = time.monotonic()
    reported = None
    status = None
    done_at = None
    while True:
        if stop:
            break
        if status is None:
            try:
                got, raw = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, raw = pid, 0
            if got == pid:
                status = raw
                done_at = time.monotonic() + _DRAIN_S
        if done_at is not None and time.monotonic() >= done_at:
            break
        rl = [master]
        # A program that never reads: stop taking input past the cap, so the
        # host's writer is held back instead of this process growing.
        if stdin_open and len(to_pty) < _MAX_PENDING:
            rl.append(0)
        wl = [master] if to_pty else []
        try:
            ready_r, ready_w = _ready(rl, wl, _QUIET_S)
        except InterruptedError:
            continue
        if master in ready_w:
            try:
                n = os.write(master, to_pty[:4096])
                to_pty = to_pty[n:]
                last_out = time.monotonic()
            except BlockingIOError:
                pass
            except OSError:
                to_pty = b""
        if master in ready_r:
            try:
                data = os.read(master, 65536)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""  # EIO: every slave fd is closed
            if data:
                try:
                    os.write(1, data)
                except OSError:
                    break
                out_total += len(data)
                last_out = time.monotonic()
                reported = None
            elif data == b"":
                break
        if 0 in ready_r:
            chunk = os.read(0, 65536)
            if not chunk:
                stdin_open = False
                break  # the host went away or closed the session: hang up
            pending += chunk
            while len(pending) >= _HDR.size:
                kind, size = _HDR.unpack_from(pending)
                if size > _MAX_FRAME:
                    os.write(2, b"dsh-tty: bad frame\n")
                    stop.append(0)
                    break
                if len(pending) < _HDR.size + size:
                    break
                body = pending[_HDR.size:_HDR.size + size]
                frames += 1
                pending = pending[_HDR.size + size:]
                if kind == b"d":
                    to_pty += body
                elif kind == b"w" and size == 4:
                    _winsize(master, *struct.unpack(">HH", body))
                elif kind == b"k" and size == 1:
                    try:
                        fg = os.tcgetpgrp(master)
                        # SIGKILL never goes to the shell itself: closing the
                        # session is how it ends (everything else is killed then).
                        if not (body[0] == signal.SIGKILL and fg == pid):
                            os.killpg(fg, body[0])
                    except OSError:
                        pass
                    # A program that was reading answers a signal and reads
                    # again at once: give it the quiet time an answer takes.
                    last_out = time.monotonic()
                elif kind == b"e":
                    to_pty += b"\x04"
                reported = None
        if status is None and not to_pty and time.monotonic() - last_out >= _QUIET_S:
            try:
                fg = os.tcgetpgrp(master)
            except OSError:
                fg = -1
            reading = 1 if fg > 0 and not _unread(slave) and _reading(fg, tty_rdev, waits) else 0
            # What it printed before it started reading must be counted first:
            # the host takes "reading" as "everything it said is on screen".
            if reading and master in _ready([master], [], 0)[0]:
                continue
            shell = 1 if fg == pid else 0
            if reported != (out_total, reading, frames, shell):
                reported = (out_total, reading, frames, shell)
                _status(("state", out_total, reading, frames, shell))
    if status is None:
        try:
            os.kill(pid, signal.SIGHUP)
        except OSError:
            pass
    reaped = _kill_all(me, pid)
    if status is None:
        status = reaped if reaped is not None else signal.SIGKILL
    if os.WIFSIGNALED(status):
        _status(("exit", -1, os.WTERMSIG(status)))
        return 128 + os.WTERMSIG(status)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    _status(("exit", code, 0))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
