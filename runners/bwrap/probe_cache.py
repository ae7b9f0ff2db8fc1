"""A trial sandbox that worked, remembered between processes.

Each ``dsh-sandbox run`` on bwrap used to start a trial sandbox (and ask
``bwrap --version``) before its command: about 10 ms of every call.  Whether
the trial works depends only on what the key below reads, so a success is
kept under that key and a later process with the same key skips the trial:

- the programs the trial runs (bwrap, unshare, true: path, device, inode,
  size, mtime and ctime) and its exact arguments, the compiled syscall
  filter it installs;
- the kernel (``uname`` and the boot id: a reboot or another kernel probes
  again), the root directory (a chroot), the knobs that allow or forbid user namespaces (sysctls, AppArmor's
  restriction), the caller's namespaces, credentials, capabilities,
  ``no_new_privs``, seccomp state and LSM label;
- and it lasts ``MAX_AGE_S`` at most.

Only a success is kept: a failure is probed again each time, so its reason
is current.  A stale or forged success skips nothing that guards a command:
the command's own sandbox is made by bwrap as before, and if bwrap cannot
make it the run fails (never unsandboxed).  The file lives in dsh-sandbox's
cache directory, which no run can see or write, and is read only when this
uid owns it and nobody else may write it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from dsh.sandbox.own_dirs import OwnDir, read_regular_file

#: How long a remembered success stands.
MAX_AGE_S = 3600
_FORMAT = 1
#: What a kept entry can be at most (it is a line of JSON).
_MAX_FILE = 4096

#: The knobs that decide whether an unprivileged user namespace can be made.
_SYSCTLS = (
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_unconfined",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_ipc_namespaces",
    "/proc/sys/user/max_uts_namespaces",
    "/proc/sys/user/max_cgroup_namespaces",
    "/proc/sys/kernel/seccomp/actions_avail",
    "/proc/sys/kernel/random/boot_id",
    "/proc/self/attr/current",
)
_NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")
_STATUS_FIELDS = ("Uid:", "Gid:", "Groups:", "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:",
                  "NoNewPrivs:", "Seccomp:", "Seccomp_filters:")


def trial_key(argv: Sequence[str], programs: Sequence[str], filter_fd: int | None) -> str:
    """What a trial sandbox's outcome depends on, hashed."""
    facts: dict[str, object] = {"format": _FORMAT, "argv": list(argv),
                                "uname": list(os.uname()), "euid": os.geteuid(), "egid": os.getegid()}
    root = os.stat("/")  # a chroot is another machine to bwrap
    facts["root"] = [root.st_dev, root.st_ino]
    for program in programs:
        try:
            st = os.stat(program)
            facts[program] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        except OSError:
            facts[program] = None
    for path in _SYSCTLS:
        facts[path] = _read(path)
    for name in _NAMESPACES:
        try:
            facts[f"ns/{name}"] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            facts[f"ns/{name}"] = None
    status = _read("/proc/self/status") or ""
    facts["status"] = [line for line in status.splitlines() if line.startswith(_STATUS_FIELDS)]
    if filter_fd is not None:
        facts["filter"] = hashlib.sha256(os.pread(filter_fd, 1 << 20, 0)).hexdigest()
    text = json.dumps(facts, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _cache_dir() -> Path | None:
    from dsh.sandbox.own_state import cache_base

    base = cache_base()
    return None if base is None else base / "dsh-sandbox" / "probes"


def _name(key: str) -> str:
    return f"bwrap-{key[:32]}"


def remembered(key: str) -> str | None:
    """The ``bwrap --version`` of a trial that worked under ``key`` within
    ``MAX_AGE_S`` (``""`` when bwrap printed none), or None."""
    where = _cache_dir()
    if where is None:
        return None
    read = read_regular_file(str(where / _name(key)), limit=_MAX_FILE)
    if read is None:
        return None
    info, data = read
    # Ours and no one else's to write.
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return None
    try:
        kept = json.loads(data)
        if kept["key"] != key or not 0 <= time.time() - float(kept["at"]) <= MAX_AGE_S:
            return None
        version = kept["version"]
    except (ValueError, KeyError, TypeError):
        return None
    # Printed by ``runners``: text a terminal shows as it is, or probed anew.
    if not isinstance(version, str) or len(version) > 200 or not (version.isascii() and version.isprintable()):
        return None
    return version


def remember(key: str, version: str | None) -> None:
    """Keep a trial that worked (best effort: the next process probes again)."""
    from dsh.sandbox.own_dirs import replace_file

    own = _own_dir(create=True)
    if own is None:
        return
    data = json.dumps({"key": key, "at": time.time(), "version": version or ""}).encode()
    try:
        replace_file(own, _name(key), data)
    except OSError:
        pass
    finally:
        own.close()


def forget_all() -> None:
    """Drop every remembered success: a sandbox bwrap could not set up makes
    the next process probe again (and say why, if it still cannot)."""
    own = _own_dir(create=False)
    if own is None:
        return
    try:
        for name in os.listdir(own.fd):
            if name.startswith("bwrap-"):
                try:
                    os.unlink(name, dir_fd=own.fd)
                except OSError:
                    pass
    finally:
        own.close()


def _own_dir(*, create: bool) -> OwnDir | None:
    """The cache directory, opened as dsh-sandbox's own (``create``: made if
    missing), or None where there is none to use."""
    from dsh.sandbox.errors import DshError
    from dsh.sandbox.own_dirs import open_own_dir

    where = _cache_dir()
    if where is None or not (create or os.path.isdir(where)):
        return None
    try:
        return open_own_dir(where, "bwrap probe cache", "each run starts a trial sandbox instead")
    except DshError:
        return None
