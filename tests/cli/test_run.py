"""``dsh-sandbox run``: exact argv, exit status, --json, streaming, denial hint,
fail-closed (exit 125), and every bad input refused with exit 2 before anything runs."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import CLI_TIMEOUT_S, cli, runner_flags, trusted_config_dir
from tests.support.sandboxed import LINUX_RUNNERS, need_runner

DANGER = ("--mode", "danger-full-access")


@pytest.fixture(params=LINUX_RUNNERS)
def runner(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    need_runner(name)
    return name


def test_argv_runs_exactly_without_a_shell(workspace: Path) -> None:
    done = cli("run", *DANGER, "--", "printf", "%s\n", "a b", "$x", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"a b\n$x\n"


ODD_ARGS = [b"a b", b"'q'", b'"d"', b"$x", b"`id`", b"l1\nl2", b"", b"*", b"\xff\xfe"]


def _expected(args: list[bytes]) -> bytes:
    return b"".join(b"<" + a + b">\n" for a in args)


@pytest.mark.parametrize("mode", ["danger-full-access", "read-only", "workspace-write"])
def test_argv_round_trips_bytes(workspace: Path, tmp_path: Path, runner: str, mode: str) -> None:
    flags = [*runner_flags(runner), "--mode", mode]
    done = cli("run", *flags, "--", "printf", "<%s>\n", *ODD_ARGS, cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == _expected(ODD_ARGS)


def test_dash_c_runs_through_bash(workspace: Path) -> None:
    done = cli("run", *DANGER, "-c", 'echo "$((1 + 2)) ${BASH_VERSION:+bash}"', cwd=workspace)
    assert done.returncode == 0 and done.stdout == b"3 bash\n"


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["sh", "-c", "exit 7"], 7),
        (["sh", "-c", "kill -KILL $$"], 128 + 9),
        (["sh", "-c", "kill -TERM $$"], 128 + 15),
        (["false"], 1),
    ],
)
def test_exit_status_is_mirrored(
    workspace: Path, tmp_path: Path, runner: str, argv: list[str], status: int
) -> None:
    done = cli("run", *runner_flags(runner), "--", *argv, cwd=workspace)
    assert done.returncode == status, done.stderr
    assert b"Traceback" not in done.stderr


def test_dash_c_exit_status(workspace: Path) -> None:
    assert cli("run", *DANGER, "-c", "exit 3", cwd=workspace).returncode == 3


def test_json_shape(workspace: Path, tmp_path: Path, runner: str) -> None:
    flags = runner_flags(runner)
    done = cli("run", *flags, "--json", "--", "sh", "-c", "echo out; echo err >&2; exit 4",
               cwd=workspace)
    assert done.returncode == 4
    data = json.loads(done.stdout)
    assert set(data) == {
        "exit_code", "signal", "timed_out", "aborted", "timeout_ms", "stdout", "stderr", "sandbox"
    }
    assert data["exit_code"] == 4 and data["signal"] is None
    assert data["timed_out"] is False and data["aborted"] is False
    assert data["stdout"]["text"] == "out\n" and data["stderr"]["text"] == "err\n"
    assert {"total_bytes", "omitted_bytes", "spill_path"} <= set(data["stdout"])
    assert data["sandbox"] == {
        "mode": "workspace-write",
        "denied": False,
        "enforcement": data["sandbox"]["enforcement"],
        "runner": runner,
        "runner_failed": False,
        "runner_error": None,
        "trusted_changed": [],
        "trusted_unsearched": [],
        "removed_from_git": [],  # links the run planted in a git dir, removed after it
        "refusal_note": None,  # a refusal no wider mode would lift (socket, network off, ...)
        "network_denied": [],  # hosts the network allowlist refused
        "network_denied_shared": False,  # another command of the session ran meanwhile
    }
    assert data["sandbox"]["enforcement"].startswith(("full", "partial"))


def test_json_names_the_links_removed_from_a_git_dir(workspace: Path, tmp_path: Path,
                                                     runner: str) -> None:
    plant = "git init -q r && ln -s /etc/passwd r/.git/COMMIT_EDITMSG"
    done = cli("run", *runner_flags(runner), "--json", "--", "sh", "-c", plant, cwd=workspace)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    link = workspace / "r" / ".git" / "COMMIT_EDITMSG"
    assert data["sandbox"]["removed_from_git"] == [str(link)]
    assert not link.is_symlink()


def test_output_streams_before_the_command_ends(workspace: Path, tmp_path: Path,
                                                runner: str) -> None:
    # The command prints a line, then waits for a file only this test creates
    # after it has seen that line: the line must arrive while the command runs.
    go = workspace / "go"
    script = f'echo first; while [ ! -e "{go}" ]; do sleep 0.05; done; echo second'
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "dsh.cli", "run", *runner_flags(runner),
         "--timeout", "120", "--", "sh", "-c", script],
        cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout=CLI_TIMEOUT_S), "no output while the command runs"
        first = proc.stdout.readline()
        assert first == b"first\n"
        assert proc.poll() is None  # still waiting for the file
        go.touch()
        rest, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rest == b"second\n"


@pytest.fixture
def outside() -> Iterator[Path]:
    path = Path("/var/tmp") / f"dsh-cli-outside-{os.getpid()}-{os.urandom(4).hex()}"
    yield path
    if path.exists():
        path.unlink()


def test_denial_hint(workspace: Path, tmp_path: Path, runner: str, outside: Path) -> None:
    done = cli("run", *runner_flags(runner), "--", "sh", "-c", f"echo x > {outside}",
               cwd=workspace)
    assert done.returncode not in (0,)
    assert not outside.exists()
    hint = f"dsh-sandbox: write to {outside} denied under workspace-write"
    assert hint.encode() in done.stderr.splitlines()


def test_no_hint_for_an_ordinary_failure(workspace: Path, tmp_path: Path, runner: str) -> None:
    done = cli("run", *runner_flags(runner), "--", "sh", "-c", "ls /sandbox-missing",
               cwd=workspace)
    assert done.returncode != 0 and b"denied under" not in done.stderr


def test_timeout_kills_and_reports(workspace: Path) -> None:
    done = cli("run", *DANGER, "--timeout", "1", "--", "sleep", "60", cwd=workspace)
    assert done.returncode == 124
    assert b"timed out after 1000ms" in done.stderr


def test_huge_timeout_is_capped_and_reported(workspace: Path) -> None:
    done = cli("run", *DANGER, "--timeout", "100000", "--", "true", cwd=workspace)
    assert done.returncode == 0
    assert b"--timeout capped at 86400s" in done.stderr


def test_fails_closed_when_the_runner_is_unavailable(workspace: Path) -> None:
    marker = workspace / "ran"
    done = cli("run", "--runner", "seatbelt", "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 125
    assert b"SANDBOX_UNAVAILABLE" in done.stderr and b"Traceback" not in done.stderr
    assert not marker.exists()


def test_fails_closed_when_the_runner_refuses_the_profile(workspace: Path) -> None:
    need_runner("landlock")
    marker = workspace / "ran"
    done = cli("run", "--runner", "landlock", "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 125
    assert b"accept_degraded" in done.stderr
    assert not marker.exists()


BAD_INPUTS: dict[str, tuple[list[str], bytes]] = {
    "unknown mode": (["--mode", "wide-open"], b"--mode"),
    "unknown runner": (["--runner", "chroot"], b"--runner"),
    "missing profile": (["--profile", "/nonexistent/p.toml"], b"/nonexistent/p.toml"),
    "profile is a directory": (["--profile", "{tmp}"], b"{tmp}"),
    "invalid profile": (["--profile", "{tmp}/bad.toml"], b"line 1"),
    "writable root is a file": (["--writable", "{tmp}/file"], b"--writable {tmp}/file"),
    "writable /": (["--writable", "/"], b"--writable /"),
    "workspace is a file": (["--workspace", "{tmp}/file"], b"is a file"),
    "missing workspace": (["--workspace", "{tmp}/nope"], b"does not exist"),
    "missing workdir": (["--workdir", "{tmp}/nope"], b"does not exist"),
    "workdir is a file": (["--workdir", "{tmp}/file"], b"not a directory"),
    "negative timeout": (["--timeout", "-5"], b"--timeout"),
    "zero timeout": (["--timeout", "0"], b"--timeout"),
    "composition with flags": (["--composition", "{tmp}/c.yaml", "--mode", "read-only"],
                               b"--composition"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_and_runs_nothing(workspace: Path, tmp_path: Path, case: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "bad.toml").write_text("mode = 42\n")
    (tmp_path / "c.yaml").write_text("- {name: bash-sandbox}\n")
    flags, needle = BAD_INPUTS[case]
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    marker = workspace / "ran"
    done = cli("run", *flags, "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr
    assert needle.replace(b"{tmp}", os.fsencode(tmp_path)) in done.stderr, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["-c", "touch ran", "--", "touch", "ran"], b"conflict"),
        ([], b"empty command"),
        (["-c", ""], b"empty"),
        (["-c", "   "], b"empty"),
        (["--", ""], b"empty string"),
    ],
)
def test_conflicting_or_empty_command(workspace: Path, args: list[str], needle: bytes) -> None:
    done = cli("run", *DANGER, *args, cwd=workspace)
    assert done.returncode == 2
    assert needle in done.stderr and b"Traceback" not in done.stderr
    assert not (workspace / "ran").exists()


def test_writable_root_is_honoured(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    extra = Path("/var/tmp") / f"dsh-cli-extra-{os.urandom(4).hex()}"
    extra.mkdir()
    try:
        done = cli("run", "--runner", "bwrap", "--writable", str(extra), "--",
                   "touch", str(extra / "made"), cwd=workspace)
        assert done.returncode == 0, done.stderr
        assert (extra / "made").exists()
    finally:
        for child in extra.iterdir():
            child.unlink()
        extra.rmdir()


def test_no_network_by_default_and_network_flag(workspace: Path) -> None:
    need_runner("bwrap")
    probe = ["sh", "-c", "cat /proc/net/dev | grep -c :"]
    off = cli("run", "--runner", "bwrap", "--", *probe, cwd=workspace)
    on = cli("run", "--runner", "bwrap", "--network", "--", *probe, cwd=workspace)
    assert off.returncode == 0 and on.returncode == 0, (off.stderr, on.stderr)
    host = Path("/proc/net/dev").read_text().count(":")
    assert int(off.stdout) == 1  # only loopback in a fresh network namespace
    assert int(on.stdout) == host


def test_composition_file(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    comp = trusted_config_dir() / f"comp-{tmp_path.name}.yaml"
    comp.write_text(
        "- {id: policy, name: sandbox-policy, config: {mode: read-only}}\n"
        "- {id: sandbox, name: sandbox, config: {runner: bwrap}}\n"
        "- {id: shell, name: bash-sandbox}\n"
    )
    done = cli("run", "--composition", str(comp), "--json", "--", "touch", "x", cwd=workspace)
    assert done.returncode == 1, done.stderr
    facts = json.loads(done.stdout)["sandbox"]
    assert facts["mode"] == "read-only" and facts["runner"] == "bwrap" and facts["denied"]
    assert not (workspace / "x").exists()
    hint = f"dsh-sandbox: write to {workspace}/x denied under read-only"
    assert hint.encode() in done.stderr.splitlines()
    missing = cli("run", "--composition", str(tmp_path / "nope.yaml"), "--", "true")
    assert missing.returncode == 2 and b"nope.yaml" in missing.stderr
    assert b"Traceback" not in missing.stderr


def test_closed_stdout_stops_the_command(workspace: Path) -> None:
    # `dsh-sandbox run -- yes | head -1`: the command is stopped, as SIGPIPE would.
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "dsh.cli", "run", *DANGER, "--", "yes"],
        cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(2) == b"y\n"
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=CLI_TIMEOUT_S) == 128 + 13
    assert b"Traceback" not in err


def test_interrupt_kills_the_command(workspace: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "dsh.cli", "run", *DANGER, "--",
         "sh", "-c", "echo $$; exec sleep 600"],
        cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 130, err
    assert b"interrupted" in err and b"Traceback" not in err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_docker_runner_from_the_cli(workspace: Path) -> None:
    need_runner("docker")
    done = cli("run", "--runner", "docker", "--", "sh", "-c",
               "echo hi > ok.txt; cat ok.txt; echo x > /etc/dsh-docker-x", cwd=workspace)
    assert done.stdout == b"hi\n"
    assert done.returncode == 2
    assert b"dsh-sandbox: write to /etc/dsh-docker-x denied under workspace-write" in done.stderr
    assert (workspace / "ok.txt").read_text() == "hi\n"
    assert not Path("/etc/dsh-docker-x").exists()


def test_fast_output_is_complete_and_in_order(workspace: Path) -> None:
    # ~48 MB: far more than the in-memory tail, less than the spill cap, so
    # every byte must arrive in order however fast the command writes.
    done = cli("run", *DANGER, "--", "seq", "1", "7000000", cwd=workspace)
    assert done.returncode == 0, done.stderr
    expected = subprocess.run(["seq", "1", "7000000"], capture_output=True, check=True).stdout
    assert done.stdout == expected
    assert b"not shown" not in done.stderr
