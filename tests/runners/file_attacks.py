"""Attacks on host files, run inside a sandbox by every Linux runner's tests, judged from the host.

``SETID`` runs inside the sandbox (``python3 -c SCRIPT TAG SEED DIR...``): in
each writable ``DIR`` it tries, on files named ``TAG-*``, ``chmod 4755``,
``chmod g+s``, ``fchmod``, ``install -m 4755``, ``cp -p`` of a setuid file,
``tar -xp`` of a setuid member, ``open(O_CREAT, 04755)``, ``mknod`` of a
setuid regular file, and a ``security.capability`` xattr; controls (an
ordinary ``chmod 755`` and ``install -m 755``) must work.  ``SEED`` is a
directory the host filled with ``seed()``.  ``leftovers`` then looks at the
files from the host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

SETID = r"""
import io, os, stat, subprocess, sys, tarfile
tag, seed, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
def attempt(label, fn):
    try:
        fn()
        print(label + "=ok")
    except OSError as exc:
        print(label + "=errno " + str(exc.errno))
    except subprocess.CalledProcessError as exc:
        print(label + "=exit " + str(exc.returncode))
def run(*argv):
    subprocess.run(argv, check=True, stderr=subprocess.DEVNULL)
def copy_then(name, *chmod):
    run("cp", "/bin/sh", name)
    run("chmod", *chmod, name)
def fchmod(name):
    run("cp", "/bin/sh", name)
    fd = os.open(name, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o6755)
    finally:
        os.close(fd)
def untar(d, name):
    member = tarfile.TarInfo(os.path.basename(name))
    member.mode, member.size = 0o4755, 3
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(member, io.BytesIO(b"#!x"))
    with open(name + ".tar", "wb") as f:
        f.write(buffer.getvalue())
    run("tar", "-xpf", name + ".tar", "-C", d)
def capability(name):
    with open(name, "wb") as f:
        f.write(b"#!/bin/sh\n")
    # VFS_CAP_REVISION_2, effective, CAP_SETUID permitted
    os.setxattr(name, "security.capability", bytes.fromhex("01000002" "80000000" "00000000" "00000000" "00000000"))
for d in dirs:
    p = os.path.join(d, tag)
    attempt(d + " control-chmod", lambda: copy_then(p + "-ctl", "755"))
    attempt(d + " control-install", lambda: run("install", "-m", "755", "/bin/sh", p + "-ctl2"))
    attempt(d + " chmod-4755", lambda: copy_then(p + "-chmod", "4755"))
    attempt(d + " chmod-g+s", lambda: copy_then(p + "-chmodg", "g+s"))
    attempt(d + " fchmod", lambda: fchmod(p + "-fchmod"))
    attempt(d + " install", lambda: run("install", "-m", "4755", "/bin/sh", p + "-install"))
    attempt(d + " cp-p", lambda: run("cp", "-p", os.path.join(seed, "suid"), p + "-cp"))
    attempt(d + " tar", lambda: untar(d, p + "-tar"))
    attempt(d + " open", lambda: os.close(os.open(p + "-open", os.O_CREAT | os.O_WRONLY, 0o4755)))
    attempt(d + " open-g", lambda: os.close(os.open(p + "-openg", os.O_CREAT | os.O_WRONLY, 0o2755)))
    attempt(d + " mknod", lambda: os.mknod(p + "-mknod", stat.S_IFREG | 0o4755))
    attempt(d + " capability", lambda: capability(p + "-cap"))
"""

_SETID_BITS = stat.S_ISUID | stat.S_ISGID


@contextlib.contextmanager
def world_writable_tmp() -> Iterator[Path]:
    """A world-writable folder in /tmp (a writable root by default), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="dsh-attack-")).resolve()
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def seed(folder: Path) -> Path:
    """A folder readable by every uid, holding ``suid``: a setuid copy of ``/bin/sh`` (for ``cp -p``)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    shutil.copy("/bin/sh", folder / "suid")
    (folder / "suid").chmod(0o4755)
    return folder


def leftovers(dirs: list[Path], tag: str) -> list[str]:
    """Files named ``tag*`` in ``dirs`` with a setuid/setgid bit or a file capability, seen from the host."""
    found = []
    for folder in dirs:
        for entry in folder.iterdir():
            if not entry.name.startswith(tag):
                continue
            info = entry.lstat()
            if info.st_mode & _SETID_BITS:
                found.append(f"{entry} mode {stat.S_IMODE(info.st_mode):o}")
            try:
                os.getxattr(entry, "security.capability", follow_symlinks=False)
                found.append(f"{entry} has security.capability")
            except OSError as exc:
                if exc.errno != errno.ENODATA:
                    raise
    return found


def outcomes(stdout: str) -> dict[str, str]:
    """``"DIR label" -> "ok" | "errno N" | "exit N"`` from the script's output."""
    return dict(line.partition("=")[::2] for line in stdout.splitlines())


#: ``python3 -c SETVERSION FILE``: the inode generation ioctls (64- and 32-bit, generic and ext4) on O_RDONLY.
SETVERSION = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
for command in (0x40087602, 0x40047602, 0x40086604, 0x40046604):
    value = ctypes.c_long(0x5A5A5A)
    failed = libc.ioctl(fd, ctypes.c_ulong(command), ctypes.byref(value)) < 0
    print(hex(command), ctypes.get_errno() if failed else 0)
"""

_FS_IOC_GETVERSION = 0x80087601


def generation(path: Path) -> tuple[int, int]:
    """(inode generation, ctime) of ``path``, read by the host."""
    fd = os.open(path, os.O_RDONLY)
    try:
        value = struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETVERSION, bytes(8)))[0]
        return int(value), os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)


#: ``python3 -c HOLD FILE @NAME``: take a lease on FILE (O_RDONLY) and bind the abstract NAME
#: on a socketpair's socket, print the outcomes on one line, then hold them.
HOLD = r"""
import fcntl, os, socket, sys, time
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return f"errno={exc.errno}"
fd = os.open(sys.argv[1], os.O_RDONLY)
pair = socket.socketpair()
print("lease", attempt(lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)),
      "bind", attempt(lambda: pair[0].bind(sys.argv[2].encode().replace(b"@", b"\0", 1))),
      "listen", attempt(lambda: pair[1].listen(1)), flush=True)
time.sleep(120)
"""


def host_is_not_held(path: Path, name: str) -> None:
    """While HOLD runs: a host writer is not stalled by a lease, and a host daemon gets its name."""
    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # EWOULDBLOCK under a lease
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind("\0" + name.removeprefix("@"))
