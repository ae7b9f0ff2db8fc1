"""A Debian root filesystem for the docker runner's image, made by ``mmdebstrap``.

The host-copy image (``image.py``) carries the host's shell tools, but real work
needs more: a Python with ``venv`` and ``ensurepip``, a C toolchain, ``make``
and ``git``.  Copying a toolchain out of a host is fragile, so this builder asks
``mmdebstrap`` for a minimal Debian with those packages from Debian's package
archive (an apt repository, not a container registry: nothing is pulled from
a registry) and writes it as a tar that ``docker import`` reads.

Where packages come from is the host's own choice: when the host runs the
chosen suite, the Debian entries of its enabled apt sources (its mirror, its
proxy-friendly URIs) become mmdebstrap's sources; otherwise mmdebstrap picks
its own default.  ``DSH_DEBIAN_MIRROR`` overrides both.

The plan is pure (``plan_debian`` over an explicit ``AptSources`` snapshot),
so what is installed and from where is testable without the network or a daemon.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh.runners.docker.apt_sources import AptSources, read_apt_sources
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.host_tools import system_tool

# What the runner needs (bash, util-linux setsid, procps ps/kill) and what
# common workloads need: python3 with venv and ensurepip, gcc + libc headers,
# make, git, node with npm, sqlite3, util-linux flock, openssh-client
# (ssh-keygen for test suites that make keys), plus iproute2 so network
# scenarios can try `ip`.
PACKAGES: tuple[str, ...] = (
    "bash", "util-linux", "procps", "python3", "python3-venv", "make", "gcc", "libc6-dev",
    "git", "nodejs", "npm", "sqlite3", "openssh-client", "iproute2", "ca-certificates",
)
DEFAULT_SUITE = "bookworm"
# Documentation and translations are dead weight in a sandbox image.
_DPKG_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
# Keep the copyright files Debian asks to ship with the binaries.
_DPKG_INCLUDES = ("/usr/share/doc/*/copyright",)
# Docker bind-mounts these; with a read-only root the mountpoints must exist.
_MOUNTPOINTS = ("etc/hosts", "etc/hostname", "etc/resolv.conf")


@dataclass(frozen=True)
class DebianPlan:
    suite: str
    #: mmdebstrap's MIRROR arguments: the override, the host's entries as
    #: one-line ``deb ...`` sources, or none (mmdebstrap's own default).
    mirrors: tuple[str, ...]
    packages: tuple[str, ...]
    passwd_lines: tuple[str, ...]  # appended when the uid is not in Debian's base files
    group_lines: tuple[str, ...]

    def argv(self, out: Path) -> list[str]:
        """The exact ``mmdebstrap`` command that writes the rootfs tar to ``out``."""
        program = system_tool("mmdebstrap") or "/usr/bin/mmdebstrap"
        argv = [program, "--variant=minbase", "--format=tar", "--include=" + ",".join(self.packages),
                "--aptopt=Acquire::Languages \"none\""]
        argv += [f"--dpkgopt=path-exclude={p}" for p in _DPKG_EXCLUDES]
        argv += [f"--dpkgopt=path-include={p}" for p in _DPKG_INCLUDES]
        argv.append("--customize-hook=" + self.customize_script())
        argv += [self.suite, str(out), *self.mirrors]
        return argv

    def describe_source(self) -> str:
        if not self.mirrors:
            return "mmdebstrap's default mirror"
        return ", ".join(self.mirrors)

    def customize_script(self) -> str:
        """Shell run by mmdebstrap with the rootfs as ``$1``: users, mountpoints, no caches."""
        steps = [f'touch "$1/{m}"' for m in _MOUNTPOINTS]
        steps += [f'printf "%s\\n" {shlex.quote(line)} >> "$1/etc/passwd"' for line in self.passwd_lines]
        steps += [f'printf "%s\\n" {shlex.quote(line)} >> "$1/etc/group"' for line in self.group_lines]
        steps.append('rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*')
        return " && ".join(steps)


def _host_suite(os_release: str = "/etc/os-release") -> str:
    """The host's Debian codename when the host is Debian (same libc as its tools), else bookworm."""
    try:
        with open(os_release, encoding="utf-8") as fh:
            fields = dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)
    except OSError:
        return DEFAULT_SUITE
    if fields.get("ID", "").strip('"') != "debian":
        return DEFAULT_SUITE
    return fields.get("VERSION_CODENAME", "").strip('"') or DEFAULT_SUITE


def _user_lines(uid: int, gid: int, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Debian's base files already name root (0) and nobody/nogroup (65534).
    if uid in (0, 65534):
        return (), ()
    return (f"{name}:x:{uid}:{gid}:{name}:/tmp:/bin/bash",), (f"{name}:x:{gid}:",)


def plan_debian(*, suite: str | None = None, mirror: str | None = None,
                env: Mapping[str, str] | None = None, sources: AptSources | None = None) -> DebianPlan:
    """What to build and from where.  ``sources`` is the host's apt configuration
    (read from ``/etc`` when not given); ``mirror`` or ``DSH_DEBIAN_MIRROR`` wins over it."""
    import pwd

    env = os.environ if env is None else env
    chosen = suite or env.get("DSH_DEBIAN_SUITE") or _host_suite()
    override = mirror or env.get("DSH_DEBIAN_MIRROR")
    if override:
        mirrors: tuple[str, ...] = (override,)
    else:
        mirrors = (sources if sources is not None else read_apt_sources()).entries_for(chosen)
    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "dsh"
    passwd, group = _user_lines(uid, gid, name)
    return DebianPlan(
        suite=chosen,
        mirrors=mirrors,
        packages=PACKAGES,
        passwd_lines=passwd,
        group_lines=group,
    )


def debian_unavailable() -> str | None:
    """Why a Debian rootfs cannot be made here, or ``None`` when it can be tried."""
    if system_tool("mmdebstrap") is None:
        return "mmdebstrap is not installed (apt-get install mmdebstrap)"
    return None


def build_debian_tar(plan: DebianPlan, workdir: Path, *, log: Callable[[str], None] = print,
                     timeout_s: float = 1800) -> Path:
    """Runs mmdebstrap into a tar under ``workdir``; ``SandboxUnavailable`` with its last lines on failure."""
    out = Path(tempfile.mkdtemp(prefix="dsh-debian-", dir=workdir)) / "rootfs.tar"
    log(f"mmdebstrap {plan.suite} from {plan.describe_source()}: {', '.join(plan.packages)}")
    try:
        # mmdebstrap unpacks in $TMPDIR: keep those hundreds of MiB beside the tar, not in /tmp.
        done = subprocess.run(plan.argv(out), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s, check=False, env={**os.environ, "TMPDIR": str(out.parent)})
    except subprocess.TimeoutExpired:
        shutil.rmtree(out.parent, ignore_errors=True)
        raise SandboxUnavailable(f"mmdebstrap did not finish within {timeout_s:.0f} s", runner="docker") from None
    if done.returncode != 0 or not out.is_file():
        shutil.rmtree(out.parent, ignore_errors=True)
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise SandboxUnavailable(f"mmdebstrap failed (exit {done.returncode}): {tail}", runner="docker")
    return out
