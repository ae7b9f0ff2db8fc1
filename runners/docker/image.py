"""Build the docker runner's image locally, without a registry.

Two root filesystems: a minimal Debian made by ``mmdebstrap`` (``debian.py``:
python3 with venv, gcc, make, git: what real workloads need), preferred when
mmdebstrap works here; and, as the fallback that needs nothing but this
machine, a root filesystem assembled here from the host's own programs
(bash, dash, GNU coreutils, grep, sed, findutils, git, util-linux ``setsid``,
procps ``ps``/``kill``), each copied with the shared libraries ``ldd`` names,
topped up with Debian's ``busybox-static`` applets for every command the host
did not provide.  The tar is written in memory (no staging directory, all
entries owned by root) and ``docker import``ed through the SDK.

No container registry is used; the host copy works on an offline machine.
"""

from __future__ import annotations

import io
import os
import pwd
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsh.runners.docker.client import (
    DEFAULT_IMAGE,
    connect,
    find_image,
    split_tag,
    validate_image_name,
)
from dsh.sandbox.errors import ConfigError, SandboxUnavailable
from dsh.sandbox.host_tools import system_tool
from dsh.sandbox.lazy_pattern import LazyPattern

# Programs copied from the host when present.  ``bash``, ``sh``, ``kill`` and
# ``setsid`` are required (the runner's kill script needs bash); busybox can
# supply every one except bash.
HOST_PROGRAMS: tuple[str, ...] = (
    "bash", "sh", "dash", "env", "kill", "ps", "setsid", "grep", "egrep", "fgrep", "sed",
    "find", "xargs", "tar", "gzip", "diff", "cmp", "which", "awk", "mawk", "git", "ip", "make",
    # GNU coreutils
    "arch", "base64", "basename", "cat", "chgrp", "chmod", "chown", "cksum", "comm", "cp",
    "csplit", "cut", "date", "dd", "df", "dir", "dircolors", "dirname", "du", "echo", "expand",
    "expr", "factor", "false", "fmt", "fold", "head", "hostid", "id", "install", "join",
    "link", "ln", "logname", "ls", "md5sum", "mkdir", "mkfifo", "mknod", "mktemp", "mv",
    "nice", "nl", "nohup", "nproc", "numfmt", "od", "paste", "pathchk", "pr", "printenv",
    "printf", "ptx", "pwd", "readlink", "realpath", "rm", "rmdir", "seq", "sha1sum",
    "sha256sum", "sha512sum", "shred", "shuf", "sleep", "sort", "split", "stat", "stdbuf",
    "stty", "sum", "sync", "tac", "tail", "tee", "test", "timeout", "touch", "tr", "true",
    "truncate", "tsort", "tty", "uname", "unexpand", "uniq", "unlink", "users", "wc", "who",
    "whoami", "yes",
)
REQUIRED: tuple[str, ...] = ("bash", "sh", "kill", "setsid", "ps", "cat", "sleep", "ls")
BIN_DIR = "usr/bin"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LDD_PATH = LazyPattern(r"(/\S+)\s+\(0x[0-9a-f]+\)")


@dataclass
class RootfsPlan:
    """What goes into the image: host files by destination, symlinks, notes."""

    files: dict[str, Path] = field(default_factory=dict)  # dest (no leading /) -> host file
    symlinks: dict[str, str] = field(default_factory=dict)  # dest -> target
    programs: list[str] = field(default_factory=list)  # copied from the host
    busybox_applets: list[str] = field(default_factory=list)


def shared_libraries(binary: Path) -> list[Path]:
    """The libraries (and the ELF interpreter) ``ldd`` says ``binary`` loads."""
    result = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:  # a static binary ("not a dynamic executable")
        return []
    return [Path(m.group(1)) for m in _LDD_PATH.finditer(result.stdout)]


def _dest_for(host_path: Path) -> str:
    """Where a host file lands: its directory canonicalised, its own name kept.

    Keeping the name (not the symlink target's) matters for libraries: the
    loader opens ``libc.so.6``, which may be a symlink on the host.
    """
    parent = Path(os.path.realpath(host_path.parent))
    return str(parent / host_path.name).lstrip("/")


def plan_rootfs(programs: Iterable[str] = HOST_PROGRAMS) -> RootfsPlan:
    plan = RootfsPlan()
    # Mirror the host's merged-/usr symlinks so ldd's /lib64/... paths resolve.
    for top in ("bin", "lib", "lib64", "sbin"):
        host_top = Path("/") / top
        if host_top.is_symlink():
            plan.symlinks[top] = os.readlink(host_top)
    for name in programs:
        found = system_tool(name)
        if found is None:
            continue
        plan.files[f"{BIN_DIR}/{name}"] = Path(found)
        plan.programs.append(name)
        for lib in shared_libraries(Path(found)):
            plan.files.setdefault(_dest_for(lib), lib)
    _plan_python(plan)
    busybox = system_tool("busybox")  # it runs here, and goes into the image: never the caller's PATH
    if busybox is not None and not shared_libraries(Path(busybox)):  # static only
        plan.files[f"{BIN_DIR}/busybox"] = Path(busybox)
        applets = subprocess.run(
            [busybox, "--list"], capture_output=True, text=True, check=True
        ).stdout.split()
        for applet in applets:
            if f"{BIN_DIR}/{applet}" not in plan.files:
                plan.symlinks[f"{BIN_DIR}/{applet}"] = "busybox"
                plan.busybox_applets.append(applet)
    have = {Path(dest).name for dest in [*plan.files, *plan.symlinks]}
    missing = [name for name in REQUIRED if name not in have]
    if missing:
        raise SandboxUnavailable(
            f"cannot build the image: {', '.join(missing)} not found on this machine; "
            "install them (apt-get install bash coreutils procps util-linux busybox-static)",
            runner="docker",
        )
    return plan


# Debian's own python3 (not a virtualenv's): the interpreter, its standard
# library (no tests, no caches, no third-party packages) and the libraries its
# extension modules load.  Builds and test suites commonly need python3.
_SYSTEM_PYTHON = Path("/usr/bin/python3.11")
_SYSTEM_STDLIB = Path("/usr/lib/python3.11")
_STDLIB_SKIP = {"test", "__pycache__", "idlelib", "tkinter", "turtledemo", "ensurepip", "dist-packages",
                "site-packages", "lib2to3"}


def _plan_python(plan: RootfsPlan) -> None:
    if not (_SYSTEM_PYTHON.is_file() and _SYSTEM_STDLIB.is_dir()):
        return
    plan.files[f"{BIN_DIR}/{_SYSTEM_PYTHON.name}"] = _SYSTEM_PYTHON
    plan.symlinks[f"{BIN_DIR}/python3"] = _SYSTEM_PYTHON.name
    plan.programs.append("python3")
    for lib in shared_libraries(_SYSTEM_PYTHON):
        plan.files.setdefault(_dest_for(lib), lib)
    for dirpath, dirnames, filenames in os.walk(_SYSTEM_STDLIB):
        dirnames[:] = [d for d in dirnames if d not in _STDLIB_SKIP]
        for name in filenames:
            host = Path(dirpath) / name
            if host.is_symlink() or not host.is_file():
                continue
            plan.files[str(host).lstrip("/")] = host
            if name.endswith(".so"):
                for lib in shared_libraries(host):
                    plan.files.setdefault(_dest_for(lib), lib)


def _etc_files() -> dict[str, bytes]:
    passwd = ["root:x:0:0:root:/root:/bin/bash", "nobody:x:65534:65534:nobody:/nonexistent:/bin/sh"]
    group = ["root:x:0:", "nogroup:x:65534:"]
    uid, gid = os.getuid(), os.getgid()
    if uid not in (0, 65534):
        # Commands run as the host uid; give it a name so tools like ``id`` work.
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = "dsh"
        passwd.append(f"{name}:x:{uid}:{gid}:{name}:/tmp:/bin/bash")
        group.append(f"{name}:x:{gid}:")
    return {
        "etc/passwd": ("\n".join(passwd) + "\n").encode(),
        "etc/group": ("\n".join(group) + "\n").encode(),
        # Docker bind-mounts these; with a read-only root the mountpoints must exist.
        "etc/hosts": b"127.0.0.1 localhost\n",
        "etc/hostname": b"",
        "etc/resolv.conf": b"",
    }


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def write_rootfs_tar(plan: RootfsPlan, out: io.BufferedIOBase | io.BytesIO) -> None:
    with tarfile.open(fileobj=out, mode="w") as tar:
        dirs = {"tmp": 0o1777, "run": 0o755, "proc": 0o555, "sys": 0o555, "dev": 0o755,
                "root": 0o700, "home": 0o755, "etc": 0o755, "usr": 0o755, "var": 0o755,
                "usr/local/bin": 0o755}
        for dest in [*plan.files, *plan.symlinks, *_etc_files()]:
            for parent in Path(dest).parents:
                if str(parent) != "." and str(parent) not in plan.symlinks:
                    dirs.setdefault(str(parent), 0o755)
        for name in sorted(dirs, key=lambda d: d.count("/")):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, dirs[name]
            tar.addfile(_root_owned(info))
        for dest, target in sorted(plan.symlinks.items()):
            info = tarfile.TarInfo(dest)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(_root_owned(info))
        for dest, host in sorted(plan.files.items()):
            info = tar.gettarinfo(os.path.realpath(host), arcname=dest)
            with open(host, "rb") as fh:
                tar.addfile(_root_owned(info), fh)
        for dest, data in _etc_files().items():
            info = tarfile.TarInfo(dest)
            info.size, info.mode = len(data), 0o644
            tar.addfile(_root_owned(info), io.BytesIO(data))


ROOTFS_LABEL = "dsh-sandbox.image.rootfs"
METHODS = ("auto", "debian", "host")


def _image_rootfs(client: Any, image_id: str) -> str:
    labels = (client.api.inspect_image(image_id).get("Config") or {}).get("Labels") or {}
    return str(labels.get(ROOTFS_LABEL, "host-copy"))


def build_image(
    tag: str = DEFAULT_IMAGE,
    *,
    if_missing: bool = False,
    method: str = "auto",
    log: Callable[[str], None] = print,
) -> str:
    """Build (``docker import``) the runtime image; returns the image id.

    ``method``: ``debian`` (mmdebstrap: python3 with venv, gcc, make, git),
    ``host`` (copies of this machine's programs), or ``auto``: debian when
    mmdebstrap works here, else host.  With ``if_missing``, an existing image is
    kept unless ``auto`` can now replace a host-copy image with a Debian one.
    """
    from dsh.runners.docker import debian

    validate_image_name(tag, field="--tag")
    if method not in METHODS:
        raise ConfigError(f"--method: {method!r} is not one of {', '.join(METHODS)}")
    client = connect()
    try:
        existing = find_image(client, tag)
        why_not_debian = debian.debian_unavailable() if method != "host" else "host copy requested"
        if method == "debian" and why_not_debian:
            raise SandboxUnavailable(f"cannot build a Debian image: {why_not_debian}", runner="docker")
        if if_missing and existing is not None:
            rootfs = _image_rootfs(client, existing)
            if keep_existing(rootfs, method, debian_possible=why_not_debian is None):
                log(f"image {tag} already present ({existing}, {rootfs} rootfs); nothing to do")
                return existing
            log(f"image {tag} is a host-copy image; replacing it with a Debian one")
        if why_not_debian is None:
            try:
                return _import_debian(client, tag, log)
            except SandboxUnavailable as exc:
                if method == "debian":
                    raise
                log(f"Debian rootfs failed, falling back to a host copy: {exc.reason}")
        elif method == "auto":
            log(f"no Debian rootfs ({why_not_debian}); building a host copy")
        return _import_host_copy(client, tag, log)
    finally:
        client.close()


def keep_existing(rootfs: str, method: str, *, debian_possible: bool) -> bool:
    """With ``--if-missing``: is the image already there good enough?

    Only ``auto``/``debian`` on a machine that can make a Debian rootfs replace a
    host-copy image (once: the result is labelled debian).
    """
    return rootfs == "debian" or method == "host" or not debian_possible


def _import_debian(client: Any, tag: str, log: Callable[[str], None]) -> str:
    from dsh.runners.docker import debian

    with tempfile.TemporaryDirectory(prefix="dsh-image-", dir=_scratch_dir()) as scratch:
        started = time.monotonic()
        tar = debian.build_debian_tar(debian.plan_debian(), Path(scratch), log=log)
        log(f"rootfs tar of {tar.stat().st_size // 2**20} MiB in {time.monotonic() - started:.0f} s; "
            f"importing as {tag} (no registry used)")
        repository, version = split_tag(tag)
        client.api.import_image_from_file(str(tar), repository=repository, tag=version,
                                          changes=_changes("debian"))
    return _imported(client, tag, log)


def _import_host_copy(client: Any, tag: str, log: Callable[[str], None]) -> str:
    plan = plan_rootfs()
    log(f"rootfs: {len(plan.programs)} host programs ({', '.join(plan.programs[:8])}, ...), "
        f"{len(plan.busybox_applets)} busybox applets, "
        f"{len(plan.files) - len(plan.programs)} shared libraries and extras")
    buffer = io.BytesIO()
    write_rootfs_tar(plan, buffer)
    log(f"importing a {len(buffer.getvalue()) // 1024} KiB rootfs tar as {tag} (no registry used)")
    repository, version = split_tag(tag)
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=version,
                                      changes=_changes("host-copy"))
    return _imported(client, tag, log)


def _changes(rootfs: str) -> list[str]:
    return [f"ENV PATH={PATH_ENV}", 'CMD ["/bin/bash"]', "LABEL dsh-sandbox.image=1",
            f"LABEL {ROOTFS_LABEL}={rootfs}"]


def _scratch_dir() -> str | None:
    # A Debian rootfs is hundreds of MiB: not in a tmpfs /tmp when /var/tmp exists.
    return "/var/tmp" if os.path.isdir("/var/tmp") else None


def _imported(client: Any, tag: str, log: Callable[[str], None]) -> str:
    image_id = find_image(client, tag)
    if image_id is None:
        raise SandboxUnavailable(f"docker import of {tag} reported success but the image "
                                 "is not there", runner="docker")
    log(f"built {tag} ({image_id})")
    return image_id
