"""What the runner asks, as root inside the E2B sandbox, about a terminal session's pty.

envd's PTY API types, resizes and kills, but cannot say whether the program in
the foreground waits on the terminal, nor signal anything but the started
process.  This file answers both by looking at ``/proc`` of the session's
leader (the pid envd reported, which leads a session whose controlling
terminal is the pty):

- ``state PID``: prints ``<reading:0|1> <shell:0|1>``: the foreground process
  group sleeps reading the terminal (and nothing typed waits unread), and that
  group is the leader's own (the shell at its prompt);
- ``signal PID SIG``: sends SIG to the terminal's foreground process group;
  SIGKILL never goes to the leader's own group (closing the session ends it).

It is run as ``python3 -I -S -c <this source> ...``: stdlib only, no site.
"""

from __future__ import annotations

import fcntl
import os
import sys
import termios

# Syscalls a process waiting for terminal input sleeps in, by machine.
_WAITS = {
    "x86_64": {"read": 0, "readv": 19, "poll": 7, "select": 23, "pselect6": 270, "ppoll": 271},
    "aarch64": {"read": 63, "readv": 65, "pselect6": 72, "ppoll": 73},
}


def _stat(pid: int | str) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    return data[data.rindex(b")") + 2:].split()  # state ppid pgrp session tty_nr tpgid ...


def _tty(tty_nr: int) -> tuple[int, int]:
    return ((tty_nr >> 8) & 0xFFF, (tty_nr & 0xFF) | ((tty_nr >> 12) & 0xFFF00))


def _is_tty(path: str, tty: tuple[int, int]) -> bool:
    try:
        rdev = os.stat(path).st_rdev
    except OSError:
        return False
    return (os.major(rdev), os.minor(rdev)) == tty


def _unread(pid: int, tty: tuple[int, int]) -> int:
    """Bytes typed that no one has read yet (-1: cannot tell)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return -1
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        if not _is_tty(path, tty):
            continue
        try:
            handle = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            return int.from_bytes(fcntl.ioctl(handle, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
        except OSError:
            return -1
        finally:
            os.close(handle)
    return -1


def _reading(fg: int, tty: tuple[int, int], waits: dict[str, int]) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if int(_stat(name)[2]) != fg:
                continue
            with open(f"/proc/{name}/syscall") as f:
                words = f.read().split()
        except (OSError, ValueError, IndexError):
            continue
        if len(words) < 2 or not words[0].isdigit() or int(words[0]) not in waits.values():
            continue
        if int(words[0]) in (waits.get("read"), waits.get("readv")):
            try:
                fd = int(words[1], 16)
            except ValueError:
                continue
            if _is_tty(f"/proc/{name}/fd/{fd}", tty):
                return True
            continue
        # select/poll: the sets are behind pointers; a process whose stdin is
        # the terminal and that sleeps in one is taken as waiting for it.
        if _is_tty(f"/proc/{name}/fd/0", tty):
            return True
    return False


def main(args: list[str]) -> int:
    what, pid = args[0], int(args[1])
    try:
        fields = _stat(pid)
        session, tty_nr, fg = int(fields[3]), int(fields[4]), int(fields[5])
    except (OSError, ValueError, IndexError):
        session, tty_nr, fg = 0, 0, -1
    if session != pid or fg <= 0:  # gone (or no longer the session's leader)
        if what == "state":
            print("0 0")
        return 0
    if what == "signal":
        sig = int(args[2])
        if not (sig == 9 and fg == pid):
            try:
                os.killpg(fg, sig)
            except OSError:
                pass
        return 0
    tty = _tty(tty_nr)
    waits = _WAITS.get(os.uname().machine, {})
    reading = _unread(pid, tty) == 0 and _reading(fg, tty, waits)
    print(f"{int(reading)} {int(fg == pid)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
