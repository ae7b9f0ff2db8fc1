"""Scenarios for what belongs to the host and to other runs of dsh-sandbox: new
namespaces, the host's process list, other workspaces' sandbox HOMEs and other
sessions' spill files.

The host plants a secret where the command should not see it (a process's argv,
a file in a sibling HOME, a spill file of a session of its own) and judges the
command's output: a secret that reached it was read.  The namespace scenario is
judged inside (a refused ``unshare`` leaves nothing on the host to look at).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from dsh.cli.conformance.catalog_host import py
from dsh.cli.conformance.model import Check, Expect, HostEnv, RunOutput, Scenario

BLOCKED: dict[str, Expect] = {"read-only": "blocked", "workspace-write": "blocked"}
PY = ("python3",)

# unshare(CLONE_NEWUSER), then what a new user namespace's root could reach;
# every step prints "<name> ok" or "<name> refused <errno>".
USERNS = (
    "import ctypes, os, platform\nL = ctypes.CDLL(None, use_errno=True)\nL.syscall.restype = ctypes.c_long\n"
    "def attempt(name, call):\n"
    "    r = call()\n"
    "    print(name, 'ok' if r >= 0 else 'refused', ctypes.get_errno() if r < 0 else '', flush=True)\n"
    "attempt('userns', lambda: L.unshare(0x10000000))\n"
    "attempt('netns', lambda: L.unshare(0x40000000))\n"
    "attempt('mntns', lambda: L.unshare(0x00020000))\n"
    "attempt('fsopen', lambda: L.syscall(ctypes.c_long(430), b'tmpfs', ctypes.c_long(0)))\n"
    "attempt('chroot', lambda: L.chroot(b'/'))\n"
)


def _nothing_ok(env: HostEnv, out: RunOutput) -> str | None:
    lines = [line.split() for line in out.stdout.decode(errors="replace").splitlines()]
    opened = [words[0] for words in lines if words[1:2] == ["ok"]]
    if len(lines) != 5:
        return f"the attack did not run to the end: {out.stdout[-300:]!r} {out.stderr[-300:]!r}"
    return f"allowed inside the sandbox: {', '.join(opened)}" if opened else None


# -- the host's process list --------------------------------------------------------------
def _argv_victim(env: HostEnv) -> None:
    """A host process with a secret in its argv (what ``ps`` shows everyone)."""
    secret = f"dshconf-argv-{secrets.token_hex(8)}"
    proc = subprocess.Popen(["sh", "-c", "sleep 300; :", secret], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)
    env.extra.update(argv_secret=secret, argv_victim=proc.pid)
    env.cleanups += [proc.wait, proc.kill]


READ_PROCESSES = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null; echo; done; "
                  "test -e /proc/{argv_victim} && echo victim-'listed'; true")  # quoted: the script is in argv too


def _argv_unseen(env: HostEnv, out: RunOutput) -> str | None:
    blob = out.stdout + out.stderr
    if env.extra["argv_secret"].encode() in blob:
        return f"the host process {env.extra['argv_victim']}'s argv was read from /proc"
    if b"victim-listed" in out.stdout:
        return f"the host process {env.extra['argv_victim']} is listed in /proc"
    return None


# -- other runs' state --------------------------------------------------------------------
def _sibling_home(env: HostEnv) -> None:
    """Another workspace's sandbox HOME beside this run's, holding a credential."""
    from dsh.sandbox.sandbox_home import homes_dir

    secret = f"dshconf-home-{secrets.token_hex(8)}"
    home = homes_dir() / f"dshconf-other-{env.nonce[:12]}"
    home.mkdir(mode=0o700, parents=True)
    (home / ".git-credentials").write_text(f"https://user:{secret}@example.invalid\n")
    env.extra.update(other_home=home, home_secret=secret)
    env.cleanups.append(lambda: shutil.rmtree(home, ignore_errors=True))


def _spill_file(env: HostEnv) -> None:
    """A spill file of another session (this harness's own), holding output it spilled."""
    from dsh.executors.spill import SpillDir

    secret = f"dshconf-spill-{secrets.token_hex(8)}"
    spill = SpillDir([])
    fd, path = spill.create("stdout")
    try:
        os.write(fd, f"danger-full-access output: {secret}\n".encode())
    finally:
        os.close(fd)
    env.extra.update(spill_file=path, spill_dir=Path(path).parent.parent, spill_secret=secret)
    env.cleanups.append(lambda: spill.close(remove=True))


def _secret_unseen(key: str, what: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        return f"{what} was read" if env.extra[key].encode() in out.stdout + out.stderr else None

    return check


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("kern-userns", "kernel", "create a user namespace, then use what its root could: new network and "
             "mount namespaces, fsopen of a filesystem, chroot", py(USERNS), BLOCKED, check_blocked=_nothing_ok,
             covers=("syscall-filter",), requires=PY, judged_inside=True),
    Scenario("proc-cmdline-outside", "process", "read a host process's command line (a secret in argv) and find "
             "it in /proc", ("sh", "-c", READ_PROCESSES), BLOCKED, setup=_argv_victim,
             check_blocked=_argv_unseen, covers=("process-list",)),
    Scenario("own-other-home", "own-state", "read another workspace's sandbox HOME (its .git-credentials)",
             ("sh", "-c", "cat {other_home}/.git-credentials; ls -a {other_home}"), BLOCKED, setup=_sibling_home,
             check_blocked=_secret_unseen("home_secret", "another workspace's HOME")),
    Scenario("own-spill-files", "own-state", "read another session's spill file (its output)",
             ("sh", "-c", "cat {spill_file}; cat {spill_dir}/*/* 2>/dev/null; true"), BLOCKED, setup=_spill_file,
             check_blocked=_secret_unseen("spill_secret", "another session's spill file")),
)
