"""The hostile host: objects it plants before or during a run, and how it judges them after.

A setup here creates a kernel object (System V IPC, a POSIX queue, a key, a unix
socket, a terminal, a victim process) named after the scenario's nonce and
registers its removal; the matching check reads the object's state from the
host once the command is over.  A command that reached the object leaves a
mark only the host can see, so no verdict rests on what the command says.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
from pathlib import Path

from dsh.cli.conformance import kernel as k
from dsh.cli.conformance.model import Check, HostEnv, RunOutput, Setup, Unavailable

ORIGINAL = b"host-original\0"


def _ipc_names(env: HostEnv) -> None:
    env.extra.setdefault("ipc_key", k.ipc_key(env.nonce))
    env.extra.setdefault("mq", f"/dshconf-{env.nonce}")
    env.extra.setdefault("key_desc", f"dshconf-{env.nonce}")


def names(env: HostEnv) -> None:
    """Only the names (``{ipc_key}``, ``{mq}``, ``{key_desc}``): for objects the command creates."""
    _ipc_names(env)
    key, mq, desc = env.extra["ipc_key"], env.extra["mq"], env.extra["key_desc"]
    env.cleanups += [lambda: k.shm_remove(key), lambda: k.msg_remove(key), lambda: k.sem_remove(key),
                     lambda: k.mq_remove(mq), lambda: k.key_remove(desc, k.KEY_SPEC_USER_KEYRING),
                     lambda: k.key_remove(desc, k.KEY_SPEC_SESSION_KEYRING)]


# -- System V and POSIX IPC --------------------------------------------------------
def shm(env: HostEnv) -> None:
    names(env)
    k.shm_create(env.extra["ipc_key"], ORIGINAL)


def msg(env: HostEnv) -> None:
    names(env)
    k.msg_create(env.extra["ipc_key"])


def sem(env: HostEnv) -> None:
    names(env)
    k.sem_create(env.extra["ipc_key"], 5)


def mq(env: HostEnv) -> None:
    names(env)
    k.mq_create(env.extra["mq"])


def shm_intact(env: HostEnv, out: RunOutput) -> str | None:
    data = k.shm_read(env.extra["ipc_key"], len(ORIGINAL))
    if data is None:
        return "the host's shared memory segment is gone"
    return None if data == ORIGINAL else f"the host's shared memory segment now holds {data!r}"


def msg_empty(env: HostEnv, out: RunOutput) -> str | None:
    n = k.msg_pending(env.extra["ipc_key"])
    return None if n == 0 else ("the host's message queue is gone" if n < 0 else
                                f"{n} message(s) reached the host's message queue")


def sem_intact(env: HostEnv, out: RunOutput) -> str | None:
    value = k.sem_value(env.extra["ipc_key"])
    return None if value == 5 else f"the host's semaphore is {value} (was 5)"


def mq_empty(env: HostEnv, out: RunOutput) -> str | None:
    n = k.mq_messages(env.extra["mq"])
    return None if n == 0 else ("the host's POSIX queue is gone" if n < 0 else
                                f"{n} message(s) reached the host's POSIX queue")


def no_ipc_left(env: HostEnv, out: RunOutput) -> str | None:
    """Nothing the command created under the scenario's names outlives it on the host."""
    key, left = env.extra["ipc_key"], []
    if k.shm_read(key, 1) is not None:
        left.append("shm segment")
    if k.msg_pending(key) >= 0:
        left.append("message queue")
    if k.sem_value(key) is not None:
        left.append("semaphore set")
    if k.mq_messages(env.extra["mq"]) >= 0:
        left.append("POSIX queue")
    return f"IPC object(s) created inside outlive the command on the host: {', '.join(left)}" if left else None


# -- keyrings -----------------------------------------------------------------------
def _key(keyring: int) -> Setup:
    def setup(env: HostEnv) -> None:
        names(env)
        try:
            k.key_add(env.extra["key_desc"], f"keysecret-{env.nonce}".encode(), keyring)
        except OSError as exc:
            raise Unavailable(f"the host cannot add a key here: {exc}") from None

    return setup


user_key = _key(k.KEY_SPEC_USER_KEYRING)
session_key = _key(k.KEY_SPEC_SESSION_KEYRING)


def key_secret_kept(env: HostEnv, out: RunOutput) -> str | None:
    if f"keysecret-{env.nonce}".encode() in out.stdout + out.stderr:
        return "the host key's payload was read inside the sandbox"
    for ring, name in ((k.KEY_SPEC_USER_KEYRING, "user"), (k.KEY_SPEC_SESSION_KEYRING, "session")):
        serial = k.key_find(env.extra["key_desc"], ring)
        payload = k.key_read(serial) if serial is not None else None
        if payload is not None and payload != f"keysecret-{env.nonce}".encode():
            return f"the host's {name} key was rewritten to {payload!r}"
    return None


def no_key_planted(env: HostEnv, out: RunOutput) -> str | None:
    found = [name for ring, name in ((k.KEY_SPEC_USER_KEYRING, "user"), (k.KEY_SPEC_SESSION_KEYRING, "session"))
             if k.key_find(env.extra["key_desc"] + "-in", ring) is not None]
    for ring in (k.KEY_SPEC_USER_KEYRING, k.KEY_SPEC_SESSION_KEYRING):
        k.key_remove(env.extra["key_desc"] + "-in", ring)
    return f"a key planted inside is in the host's {' and '.join(found)} keyring" if found else None


# -- unix sockets --------------------------------------------------------------------
def unix_socket(kind: str, *, abstract: bool = False, relative: bool = False, inside: bool = False) -> Setup:
    """A counted host socket ``{sock}`` (hits under ``sock``): outside, or in the workspace."""

    def setup(env: HostEnv) -> None:
        if abstract:
            path = f"\0dshconf-{kind}-{env.nonce}"
            env.extra["sock"] = "\\0" + path[1:]  # as a Python literal inside the command
        else:
            path = str((env.ws if inside else env.outside) / f"{kind[0]}-{env.nonce[:8]}.sock")
            env.extra["sock"] = path
        env.listeners.unix("sock-" + env.nonce, kind, path, relative=relative)

    return setup


def no_socket_hits(env: HostEnv, out: RunOutput) -> str | None:
    n = env.hits("sock-" + env.nonce)
    return None if n == 0 else f"the host's socket saw {n} connection(s)/datagram(s)"


def socket_name(kind: str) -> Setup:
    """Only the path ``{sock}`` the host will listen on (for a socket created mid-run)."""

    def setup(env: HostEnv) -> None:
        env.extra["sock"] = str(env.outside / f"{kind[0]}-{env.nonce[:8]}.sock")

    return setup


def open_socket(kind: str) -> Setup:
    def during(env: HostEnv) -> None:
        env.listeners.unix("sock-" + env.nonce, kind, env.extra["sock"])

    return during


# -- the user's terminal ---------------------------------------------------------------
def host_pty(env: HostEnv) -> None:
    """A pty standing in for the user's terminal, with a typed line waiting at ``{pty}``."""
    master, slave = os.openpty()
    env.extra["pty"] = os.ttyname(slave)
    env.extra["_pty_fds"] = (master, slave)
    env.cleanups += [lambda: os.close(master), lambda: os.close(slave)]
    os.write(master, f"typed-{env.nonce}\n".encode())


def _drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while data := os.read(fd, 4096):
            chunks.append(data)
    return b"".join(chunks)


def terminal_untouched(env: HostEnv, out: RunOutput) -> str | None:
    master, slave = env.extra["_pty_fds"]
    if f"typed-{env.nonce}".encode() in out.stdout + out.stderr:
        return "what the user typed on the host terminal was read inside the sandbox"
    shown, typed = _drain(master), _drain(slave)
    if f"inject-{env.nonce}".encode() in shown:
        return "the command wrote to the user's terminal"
    if f"sti-{env.nonce}".encode() in typed:
        return "the command pushed input into the user's terminal (TIOCSTI)"
    if f"typed-{env.nonce}".encode() not in typed:
        return "the line the user typed was consumed from the host terminal"
    return None


# -- processes -------------------------------------------------------------------------
def _state(pid: int) -> dict[str, object]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b") ", 1)[1].split()
    # Only "stopped or traced" matters: running and sleeping alternate on their own.
    return {"stopped": fields[0] in (b"T", b"t"), "nice": os.getpriority(os.PRIO_PROCESS, pid),
            "nofile": resource.prlimit(pid, resource.RLIMIT_NOFILE), "ioprio": k.ioprio(pid),
            "affinity": sorted(os.sched_getaffinity(pid)), "policy": os.sched_getscheduler(pid)}


def victim(env: HostEnv) -> None:
    """A fresh host process (``{victim}``) holding the planted secrets in its environment."""
    proc = subprocess.Popen(["sleep", "300"], env={**os.environ, **env.secrets}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL)
    env.victim_pid = proc.pid
    env.extra["_victim_state"] = _state(proc.pid)
    env.cleanups += [proc.wait, proc.kill]


def victim_unchanged(env: HostEnv, out: RunOutput) -> str | None:
    try:
        now = _state(env.victim_pid)
    except (OSError, ProcessLookupError):
        return f"host process {env.victim_pid} died during the run"
    before = env.extra["_victim_state"]
    changed = [f"{key} {before[key]!r} -> {now[key]!r}" for key in before if before[key] != now[key]]
    return f"the host process {env.victim_pid} was changed from inside: {'; '.join(changed)}" if changed else None


def supervisor_core_limit(env: HostEnv) -> None:
    """The harness itself is the supervisor: pin its RLIMIT_CORE soft limit to 0 to watch it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == 0:
        raise Unavailable("RLIMIT_CORE hard limit is 0: a change would not show")
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    env.cleanups.append(lambda: resource.setrlimit(resource.RLIMIT_CORE, (soft, hard)))


def supervisor_unchanged(env: HostEnv, out: RunOutput) -> str | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_CORE)
    return None if soft == 0 else f"the supervising process's RLIMIT_CORE was set to {soft} from inside"


# -- kernel state ------------------------------------------------------------------------
SYSCTL = Path("/proc/sys/kernel/printk_ratelimit_burst")  # host-global, harmless to change back


def sysctl(env: HostEnv) -> None:
    original = SYSCTL.read_text()
    env.extra["_sysctl"] = original

    def restore() -> None:
        if SYSCTL.read_text() != original:
            SYSCTL.write_text(original)

    env.cleanups.append(restore)


def sysctl_unchanged(env: HostEnv, out: RunOutput) -> str | None:
    now = SYSCTL.read_text()
    return None if now == env.extra["_sysctl"] else f"host sysctl {SYSCTL} changed to {now.strip()}"


def inode_flags(template: str) -> Setup:
    def setup(env: HostEnv) -> None:
        path = env.fmt(template)
        try:
            env.extra["_flags"] = (k.inode_flags(path), k.fsxattr(path))
        except OSError as exc:
            raise Unavailable(f"{path}: the host filesystem has no inode flags ({exc.strerror})") from None

    return setup


def inode_flags_unchanged(template: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = env.fmt(template)
        now = (k.inode_flags(path), k.fsxattr(path))
        return None if now == env.extra["_flags"] else f"{path}: inode flags changed {env.extra['_flags']} -> {now}"

    return check


def no_cgroup_dir(env: HostEnv, out: RunOutput) -> str | None:
    # Other sessions make and remove their cgroups meanwhile: a directory that
    # goes during the walk is skipped (os.walk's default), never a crash.
    name = f"dshconf-{env.nonce}"
    made = [Path(top, name) for top, dirs, _files in os.walk("/sys/fs/cgroup") if name in dirs]
    for path in made:
        with contextlib.suppress(OSError):
            path.rmdir()
    return f"cgroup(s) created inside: {[str(p) for p in made]}" if made else None


def kill_marked(env: HostEnv) -> None:
    """Cleanup for escapes: kill whatever still carries the scenario's mark."""
    from dsh.cli.conformance.checks import _marked_pids

    for pid in _marked_pids(f"dshconf-{env.nonce}"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
