"""``dsh-sandbox --help`` and ``--version`` from the installed script: the
text click renders, without importing click (or ``re``) when that is the
same text, through click whenever it is not."""

from __future__ import annotations

import os
import pty
import select
import struct
import subprocess
import sys
import termios
import textwrap
from collections.abc import Mapping
from fcntl import ioctl
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "dsh-sandbox"

CLICK_HELP = "from dsh.cli.app import run_main\nrun_main(['--help'])\n"


def env_with(columns: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return {**env, **extra}


def click_renders(env: Mapping[str, str]) -> str:
    done = subprocess.run([sys.executable, "-P", "-c", CLICK_HELP], capture_output=True, text=True,
                          env=dict(env), check=True, timeout=60)
    return done.stdout


def script(*args: str, env: Mapping[str, str], importtime: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *(["-X", "importtime"] if importtime else []), str(SCRIPT), *args]
    return subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False, timeout=60)


def imported(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_the_script_is_installed_next_to_the_interpreter() -> None:
    assert SCRIPT.is_file(), f"{SCRIPT} missing: install the project (pip install -e .)"
    first = SCRIPT.read_bytes().split(b"\n", 1)[0]
    assert first.startswith(b"#!") and b"python" in first, first


@pytest.mark.parametrize("columns", [None, "", "x", "-5", "50", "79", "80", "81", "200"])
def test_the_script_prints_what_click_renders_at_any_width(columns: str | None) -> None:
    env = env_with(columns)
    expected = click_renders(env)
    assert expected.startswith("Usage: dsh-sandbox [OPTIONS] COMMAND [ARGS]...\n")
    for flag in ("--help", "-h"):
        done = script(flag, env=env)
        assert (done.returncode, done.stdout, done.stderr) == (0, expected, ""), flag


@pytest.mark.parametrize("columns", [60, 120])
def test_the_script_prints_what_click_renders_on_a_terminal(columns: int) -> None:
    controller, terminal = pty.openpty()
    ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    try:
        proc = subprocess.Popen([str(SCRIPT), "--help"], stdout=terminal, stderr=subprocess.DEVNULL,
                                env=env_with(None))
        os.close(terminal)
        chunks = []
        while True:
            ready, _, _ = select.select([controller], [], [], 30)
            assert ready, "no output from --help within 30 s"
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=30) == 0
    finally:
        os.close(controller)
    shown = b"".join(chunks).decode().replace("\r\n", "\n")
    assert shown == click_renders(env_with(str(columns)))


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_version_and_help_alone_import_neither_click_nor_re(args: list[str]) -> None:
    env = env_with("100")
    done = script(*args, env=env, importtime=True)
    assert done.returncode == 0, done.stderr
    start = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                           env=env, check=True, timeout=60)
    # Beyond what the interpreter's own start imports (a site hook may import more).
    added = imported(done.stderr) - imported(start.stderr)
    assert "dsh.cli" in added, done.stderr  # the probe sees the package's own imports
    assert not added & {"click", "re", "typing"}, sorted(added & {"click", "re", "typing"})


def test_a_narrow_terminal_goes_through_click() -> None:
    done = script("--help", env=env_with("60"), importtime=True)
    assert done.returncode == 0
    assert "click" in imported(done.stderr)


def test_a_command_another_package_adds_is_listed(tmp_path: Path) -> None:
    """A plugin's command makes the help click's: the text kept for this
    package alone would leave it out."""
    (tmp_path / "extra_cmd.py").write_text(textwrap.dedent('''
        import click

        @click.command()
        def hello() -> None:
            """Say hello from a plugin."""
        '''))
    info = tmp_path / "extra_cmd-1.0.dist-info"
    info.mkdir()
    (info / "entry_points.txt").write_text("[dsh_sandbox.commands]\nhello = extra_cmd:hello\n")
    env = env_with("100", PYTHONPATH=str(tmp_path))
    done = script("--help", env=env, importtime=True)
    assert done.returncode == 0, done.stderr
    assert "  hello        Say hello from a plugin.\n" in done.stdout
    assert "click" in imported(done.stderr)
    # Without it, the same environment prints the text kept here, without click.
    (info / "entry_points.txt").write_text("[console_scripts]\nhello = extra_cmd:hello\n")
    kept = script("--help", env=env, importtime=True)
    assert "hello" not in kept.stdout and "click" not in imported(kept.stderr)
    assert kept.stdout == click_renders(env)


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_a_reader_gone_or_a_full_disk_is_no_traceback(args: list[str]) -> None:
    gone = _to_a_reader_gone(args)
    assert (gone.returncode, gone.stderr) == (0, b"")
    done = _to_a_full_disk(args)
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert b"cannot write to standard output: No space left on device" in done.stderr


@pytest.mark.parametrize("args", [["run", "--help"], ["runners"]], ids=" ".join)
def test_a_full_disk_or_a_reader_gone_on_clicks_own_paths_is_no_traceback(args: list[str]) -> None:
    """The commands click renders: a full disk is the same one line as on the
    fast path; a reader gone ends quietly (click's own status 1)."""
    done = _to_a_full_disk(args)
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    assert done.stderr == b"dsh-sandbox: cannot write to standard output: No space left on device\n"
    gone = _to_a_reader_gone(args)
    assert (gone.returncode, gone.stderr) == (1, b"")


def _to_a_reader_gone(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """``dsh-sandbox ARGS | true``, the reader gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([str(SCRIPT), *args], stdout=write_end, stderr=subprocess.PIPE,
                              env=env_with("100"), check=False, timeout=120)
    finally:
        os.close(write_end)


def _to_a_full_disk(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    with open("/dev/full", "wb") as full:
        return subprocess.run([str(SCRIPT), *args], stdout=full, stderr=subprocess.PIPE, env=env_with("100"),
                              check=False, timeout=120)
