"""Host-side checks and setups the catalog composes (small, named, reusable)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from pathlib import Path

from dsh.cli.conformance.model import Check, HostEnv, RunOutput, Setup


def all_of(*checks: Check) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        for c in checks:
            problem = c(env, out)
            if problem:
                return problem
        return None

    return check


def exit_zero(env: HostEnv, out: RunOutput) -> str | None:
    if out.exit_code == 0:
        return None
    tail = out.stderr[-300:].decode("utf-8", "replace")
    return f"expected exit 0, got exit={out.exit_code} signal={out.signal}; stderr: {tail!r}"


def exit_nonzero(env: HostEnv, out: RunOutput) -> str | None:
    return "expected the command to fail, it exited 0" if out.exit_code == 0 else None


def absent(template: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        return f"{path} exists on the host" if os.path.lexists(path) else None

    return check


def absent_or_reported(template: str) -> Check:
    """The file is not on the host, or the run's facts name it (a created
    repository or config must never reach the host unnoticed)."""

    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = env.fmt(template)
        if not os.path.lexists(path) or path in out.trusted_changed:
            return None
        return f"{path} was written on the host and the run did not report it"

    return check


def absent_empty_or_reported(template: str) -> Check:
    """Nothing was put at the path, or the run's facts name what was."""
    empty = absent_or_empty(template)

    def check(env: HostEnv, out: RunOutput) -> str | None:
        problem = empty(env, out)
        if problem is None or env.fmt(template) in out.trusted_changed:
            return None
        return f"{problem}, and the run did not report it"

    return check


def absent_or_empty(template: str) -> Check:
    """Nothing was put at the path: it is absent, or an empty directory or file.

    A runner with a long-lived sandbox (Docker's warm container) keeps a missing
    protected path from being created by mounting an empty read-only
    placeholder there; that placeholder must never gain content.
    """

    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        if not os.path.lexists(path):
            return None
        if path.is_symlink():
            return f"{path} is a symlink on the host"
        if path.is_dir():
            entries = os.listdir(path)
            return f"{path} was created with {sorted(entries)[:5]}" if entries else None
        return f"{path} was created with {path.stat().st_size} bytes" if path.stat().st_size else None

    return check


def remove(template: str) -> Check:
    """Not a check: removes what an allowed write left on the host (always passes)."""

    def check(env: HostEnv, out: RunOutput) -> str | None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(env.fmt(template))
        return None

    return check


def file_is(template: str, content: bytes) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        try:
            data = path.read_bytes()
        except OSError as exc:
            return f"{path}: {exc.strerror} on the host"
        return None if data == content else f"{path} holds {data[:60]!r}, expected {content[:60]!r}"

    return check


def present(template: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        return None if os.path.lexists(path) else f"{path} is not on the host"

    return check


def mode_is(template: str, mode: int) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        path = Path(env.fmt(template))
        actual = stat.S_IMODE(path.stat().st_mode)
        return None if actual == mode else f"{path} mode is {oct(actual)}, expected {oct(mode)}"

    return check


def no_hits(listener: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        # Give a late packet a moment to arrive before declaring the listener untouched.
        time.sleep(0.2)
        n = env.hits(listener)
        return None if n == 0 else f"the host {listener} listener saw {n} connection(s)/packet(s)"

    return check


def stdout_lacks_secrets(env: HostEnv, out: RunOutput) -> str | None:
    blob = out.stdout + out.stderr
    leaked = [k for k, v in env.secrets.items() if v.encode() in blob]
    return f"secret(s) visible inside: {', '.join(sorted(leaked))}" if leaked else None


def stdout_is(expected: bytes) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        return None if out.stdout == expected else f"stdout {out.stdout[:120]!r} != {expected[:120]!r}"

    return check


def stdout_has(template: str) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        want = env.fmt(template).encode()
        return None if want in out.stdout else f"stdout lacks {want!r}: {out.stdout[:200]!r}"

    return check


def victim_alive(env: HostEnv, out: RunOutput) -> str | None:
    try:
        os.kill(env.victim_pid, 0)
    except ProcessLookupError:
        return f"host process {env.victim_pid} was killed from inside the sandbox"
    return None


def _marked_pids(marker: str) -> list[int]:
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b") ", 1)[1][:1]
        except OSError:
            continue
        if needle in cmdline and state != b"Z":
            found.append(int(entry))
    return found


def no_process_left(env: HostEnv, out: RunOutput) -> str | None:
    """Nothing the command started (marked with the nonce) outlives the run."""
    deadline = time.monotonic() + 5
    while True:
        pids = _marked_pids(f"dshconf-{env.nonce}")
        if not pids:
            return None
        if time.monotonic() > deadline:
            return f"process(es) {pids} started by the command are still running"
        time.sleep(0.1)


def timed_out(env: HostEnv, out: RunOutput) -> str | None:
    return None if out.timed_out else f"expected a timeout, got exit={out.exit_code} signal={out.signal}"


def ended_within(seconds: float) -> Check:
    def check(env: HostEnv, out: RunOutput) -> str | None:
        return None if out.elapsed_s <= seconds else f"took {out.elapsed_s:.1f}s (> {seconds}s)"

    return check


# -- setups ------------------------------------------------------------------------
def make_file(template: str, content: bytes = b"orig\n", mode: int = 0o644) -> Setup:
    def setup(env: HostEnv) -> None:
        path = Path(env.fmt(template))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)

    return setup


def make_symlink(link: str, target: str) -> Setup:
    def setup(env: HostEnv) -> None:
        Path(env.fmt(link)).symlink_to(env.fmt(target))

    return setup


def git_dir(env: HostEnv) -> None:
    """A minimal `.git` at the workspace root with a config the attacks target."""
    git = env.root / ".git"
    if git.is_symlink() or git.is_file():
        git.unlink()
    git.mkdir(exist_ok=True)
    (git / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n")
    for leftover in (env.root / "g2",):
        if leftover.exists():
            shutil.rmtree(leftover)


def no_git_dir(env: HostEnv) -> None:
    git = env.root / ".git"
    if git.is_dir() and not git.is_symlink():
        shutil.rmtree(git)
    elif os.path.lexists(git):
        git.unlink()


def sequence(*setups: Setup) -> Setup:
    def setup(env: HostEnv) -> None:
        for s in setups:
            s(env)

    return setup
