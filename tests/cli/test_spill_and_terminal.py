"""Spill files a command cannot reach, the caller's terminal, empty path flags:
through the real CLI and real runners, judged from the host (as root and nobody)."""

from __future__ import annotations

import glob
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import LANDLOCK_ACCEPT, NOBODY, cli
from tests.support.require import require_runner
from tests.support.terminal import read_terminal
from tests.support.wait import wait_until

USERS = ["caller", "nobody"]
BIG = 5 * 1024 * 1024  # past the CLI's 4 MiB in-memory tail: the host spills


@dataclass(frozen=True)
class Home:
    """A caller's home (``HOME``), its workspace, and a directory outside
    every writable root that an attack tries to make the host write into."""

    base: Path
    user: str

    @property
    def ws(self) -> Path:
        return self.base / "ws"

    @property
    def target(self) -> Path:
        return self.base / "target"

    @property
    def tmp(self) -> Path:
        return self.base / "tmp"

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.base), "TMPDIR": str(self.tmp), "LANG": "C.UTF-8"}

    def popen(self, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
        if self.user == "nobody":
            kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
        return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
            [*cli(self.user), *args], cwd=self.ws, env=self.env(), **kwargs
        )

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[bytes]:
        proc = self.popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def spill_globs(self) -> str:
        """Where this CLI's spill directory was ($TMPDIR, a writable root) or
        is now (under $HOME); both private to the test, so no other session's
        files can be hit."""
        return f"{self.tmp}/dsh-spill-* {self.base}/.cache/dsh-sandbox/spill/session-*"

    def profile(self) -> str:
        path = self.base / "profile.toml"
        path.write_text('extends = "workspace-write"\n' + LANDLOCK_ACCEPT)
        path.chmod(0o644)
        return str(path)


@pytest.fixture(params=USERS)
def home(request: pytest.FixtureRequest) -> Iterator[Home]:
    user: str = request.param
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="dsh-spill-home-", dir="/var/tmp")).resolve()
    os.chmod(base, 0o755)
    (base / "ws").mkdir()
    (base / "target").mkdir()
    (base / "tmp").mkdir()
    if user == "nobody":
        for path in (base, base / "ws", base / "target", base / "tmp"):
            os.chown(path, NOBODY, NOBODY)
    try:
        yield Home(base, user)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the spill directory -------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_a_command_cannot_redirect_the_hosts_spill_files(home: Home, runner: str) -> None:
    require_runner(runner)
    # Spill stdout (the host makes the directory), swap the directory for a
    # link to a host directory, then spill stderr: the host must not follow.
    attack = (
        f"head -c {BIG} /dev/zero; "
        f"for d in {home.spill_globs()}; do [ -d \"$d\" ] || continue; "
        f"mv \"$d\" \"$d.moved\" && ln -s {home.target} \"$d\" && echo swapped \"$d\" >&2; done; "
        f"head -c {BIG} /dev/zero | tr '\\0' x >&2; exit 0"
    )
    done = home.run("run", "--runner", runner, "--profile", home.profile(), "--json", "-c", attack)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(home.target.iterdir()) == []  # nothing written through a planted link
    import json

    result = json.loads(done.stdout)
    paths = [Path(result[s]["spill_path"]) for s in ("stdout", "stderr")]
    for path in paths:
        # Outside every root the command could write, a real file in a real,
        # private directory, still readable after the CLI exited.
        for root in (Path("/tmp"), home.tmp, home.ws):
            assert not path.is_relative_to(root), path
        assert not path.parent.is_symlink() and (path.parent.stat().st_mode & 0o777) == 0o700
        assert path.stat().st_uid == (NOBODY if home.user == "nobody" else os.geteuid())
    assert paths[0].read_bytes() == b"\0" * BIG
    stderr = paths[1].read_bytes()
    assert stderr.endswith(b"x" * BIG) and b"swapped" not in stderr  # the swap was refused


@pytest.mark.parametrize("plant", ["fifo", "symlink"])
def test_catch_up_reads_the_spill_through_its_fd(home: Home, plant: str) -> None:
    # A command that can reach its spill file (here: danger-full-access) puts a
    # FIFO or a link to a hidden file in its place while the CLI's reader is
    # slow: the CLI must neither block nor print the hidden bytes.
    hidden = home.base / "hidden"
    hidden.write_bytes(b"HIDDEN-SECRET\n" * 1000)
    hidden.chmod(0o644)
    stdout_spills = " ".join(f"{g}/stdout-*.log" for g in home.spill_globs().split())
    swap = "mkfifo \"$f\"" if plant == "fifo" else f"ln -s {hidden} \"$f\""
    script = (
        f"head -c {BIG} /dev/zero | tr '\\0' a; i=0; "
        f"while :; do for f in {stdout_spills}; do "
        f"[ -f \"$f\" ] && break 2; done; i=$((i+1)); [ $i -gt 100 ] && break; sleep 0.05; done; "
        f"mv \"$f\" \"$f.real\" && {swap} && echo planted >&2; "
        f"head -c {BIG} /dev/zero | tr '\\0' b; echo; exit 0"
    )
    started = time.monotonic()
    proc = home.popen("run", "--mode", "danger-full-access", "--timeout", "30", "-c", script,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # A slow reader: nothing reads the CLI's stdout until the swap is in place,
    # so the CLI blocks on it and the tail of the output goes to the spill.
    wait_until(lambda: _planted(stdout_spills, plant), "the command to swap its spill file")
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the CLI hung reading its spill file")
    assert time.monotonic() - started < 60
    assert proc.returncode == 0, err[-2000:]
    assert b"planted" in err, err[-2000:]  # the attack did run
    assert b"HIDDEN" not in out + err
    assert out == b"a" * BIG + b"b" * BIG + b"\n"


def _planted(globs: str, plant: str) -> bool:
    for moved in (p for g in globs.split() for p in glob.glob(g + ".real")):
        try:
            mode = Path(moved[: -len(".real")]).lstat().st_mode
        except FileNotFoundError:
            continue  # moved, not yet replaced
        if (stat.S_ISFIFO(mode) if plant == "fifo" else stat.S_ISLNK(mode)):
            return True
    return False


# -- the caller's terminal -----------------------------------------------------------------
HOSTILE = (
    "printf 'A\\033]52;c;cHduZWQ=\\007B\\033]0;fake title\\007C\\033[6nD\\033[31mred\\033[0m\\r\\n'; "
    "printf 'E\\033[8mhidden\\033[2J\\n' >&2"
)


def test_the_filter_keeps_colours_split_across_reads() -> None:
    from dsh.cli.run_output import Visible

    visible = Visible(colours=True)
    out = visible(b"a\x1b[3") + visible(b"1mred\x1b[0m\x1b]52;c;x\x07\r\b\x1b") + visible(b"[6nz\x1b[")
    out += visible.flush()
    assert out == b"a\x1b[31mred\x1b[0m\\x1b]52;c;x\\x07\r\b\\x1b[6nz\\x1b["


def _through_pty(home: Home, *extra: str) -> tuple[int, bytes]:
    master, slave = os.openpty()
    try:
        proc = home.popen("run", "--mode", "danger-full-access", *extra, "-c", HOSTILE,
                          stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)
        seen = read_terminal(master, time.monotonic() + 120)
        return proc.wait(timeout=60), seen
    finally:
        os.close(master)


def test_escape_sequences_do_not_reach_the_terminal(home: Home) -> None:
    code, seen = _through_pty(home)
    assert code == 0, seen
    # Clipboard write, title, status report and screen clear shown, not sent.
    for raw in (b"\x1b]52;", b"\x1b]0;", b"\x1b[6n", b"\x1b[2J", b"\x07"):
        assert raw not in seen, seen
    for shown in (b"\\x1b]52;c;cHduZWQ=\\x07", b"\\x1b]0;fake title", b"\\x1b[6n", b"\\x1b[2J"):
        assert shown in seen, seen
    assert b"\x1b[31mred\x1b[0m" in seen  # colours stay colours
    assert b"\x1b[8m" in seen  # an SGR attribute too (the approval prompt resets them)


def test_raw_output_opts_out(home: Home) -> None:
    code, seen = _through_pty(home, "--raw-output")
    assert code == 0, seen
    assert b"\x1b]52;c;cHduZWQ=\x07" in seen and b"\x1b[6n" in seen


def test_not_a_terminal_gets_the_exact_bytes(home: Home) -> None:
    done = home.run("run", "--mode", "danger-full-access", "-c", HOSTILE)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"A\x1b]52;c;cHduZWQ=\x07B\x1b]0;fake title\x07C\x1b[6nD\x1b[31mred\x1b[0m\r\n"
    assert done.stderr == b"E\x1b[8mhidden\x1b[2J\n"


# -- empty path flags --------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--writable", "--workspace", "--workdir", "--force-writable", "--composition"])
def test_an_empty_path_flag_is_refused(home: Home, flag: str) -> None:
    done = home.run("run", flag, "", "--", "touch", "ran")
    assert done.returncode == 2, done.stderr
    assert f"{flag}: empty path".encode() in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
    assert not (home.ws / "ran").exists()
