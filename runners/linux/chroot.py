"""Is this process in a chroot?  The kernel refuses new user namespaces there.

``unshare(CLONE_NEWUSER)`` fails with EPERM for a process whose root is not the
root of its mount namespace (a chroot: schroot, pbuilder, sbuild, ``unshare
--root``), whatever the sysctls say.  bwrap then fails with a message about
sysctls and AppArmor that sends the user the wrong way, so a runner that needs
user namespaces names the chroot instead when it can tell:

- its ``/`` differs from pid 1's (device, inode or mount id), when pid 1's root
  can be read (root, same pid namespace): a chroot;
- else, when it cannot be read, and every knob that can refuse user
  namespaces (the sysctls, AppArmor's restriction) allows them: most likely a
  chroot (or a container whose syscall filter refuses ``unshare``).
"""

from __future__ import annotations

import contextlib
import os

#: (file, value that refuses new user namespaces)
_KNOBS = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ("/proc/sys/user/max_user_namespaces", "0"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
)
_ADVICE = (
    "the kernel refuses new user namespaces inside a chroot (schroot, pbuilder, sbuild, unshare --root); "
    "run dsh-sandbox outside the chroot, or in a container entered with pivot_root (systemd-nspawn, docker, "
    "podman)"
)


def _mount_id(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}") as fh:
            return next((line.split()[1] for line in fh if line.startswith("mnt_id:")), None)
    except OSError:
        return None
    finally:
        os.close(fd)


def root_differs_from_init() -> bool | None:
    """``True``: this process's ``/`` is not pid 1's; ``None``: cannot tell."""
    try:
        here, init = os.stat("/"), os.stat("/proc/1/root/")
    except OSError:
        return None
    if (here.st_dev, here.st_ino) != (init.st_dev, init.st_ino):
        return True
    mine, its = _mount_id("/"), _mount_id("/proc/1/root/")
    return mine is not None and its is not None and mine != its


def _knobs_allow_userns() -> bool:
    for path, refusing in _KNOBS:
        with contextlib.suppress(OSError):
            with open(path) as fh:
                if fh.read().strip() == refusing:
                    return False
    return True


def chroot_reason() -> str | None:
    """Why new user namespaces are refused here if a chroot is the cause, else ``None``."""
    differs = root_differs_from_init()
    if differs:
        return "this process runs in a chroot (its / is not pid 1's /): " + _ADVICE
    if differs is None and _knobs_allow_userns():
        return (
            "new user namespaces are refused although the sysctls and AppArmor allow them, so this process is "
            "most likely in a chroot (or a container whose syscall filter refuses unshare): " + _ADVICE
        )
    return None
