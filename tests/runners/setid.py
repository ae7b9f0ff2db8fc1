"""Every way a sandboxed command could leave a setuid/setgid file, and the host-side check.

``SCRIPT`` runs inside the sandbox (``python3 -c SCRIPT TAG SEED DIR...``): in
each writable ``DIR`` it tries, on files named ``TAG-*``, ``chmod 4755``,
``chmod g+s``, ``fchmod``, ``install -m 4755``, ``cp -p`` of a setuid file,
``tar -xp`` of a setuid member, ``open(O_CREAT, 04755)``, ``mknod`` of a
setuid regular file, and a ``security.capability`` xattr; controls (an
ordinary ``chmod 755`` and ``install -m 755``) must work.  ``SEED`` is a
directory the host filled with ``seed()``.  ``leftovers`` then looks at the
files from the host.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

SCRIPT = r"""
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

_SETID = stat.S_ISUID | stat.S_ISGID


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
            if info.st_mode & _SETID:
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
