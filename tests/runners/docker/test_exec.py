"""Exec per command: exit codes, separate streams, stdin, exact argv and env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.sandbox.errors import UsageError, WorkdirError

from tests.runners.docker.helpers import docker_runner, policy, run, sh


def test_exit_code_and_separate_streams(workspace: Path) -> None:
    with docker_runner() as runner:
        result = sh(runner, "echo out; echo err >&2; echo out2; exit 3", policy(workspace))
    assert result.status.exit_code == 3 and result.status.signal is None
    assert result.stdout == b"out\nout2\n"
    assert result.stderr == b"err\n"


def test_large_interleaved_output_stays_exact(workspace: Path) -> None:
    script = "for i in $(seq 1 20000); do echo o$i; echo e$i >&2; done; head -c 3000000 /dev/zero"
    with docker_runner() as runner:
        result = sh(runner, script, policy(workspace))
    expected_err = b"".join(b"e%d\n" % i for i in range(1, 20001))
    expected_out = b"".join(b"o%d\n" % i for i in range(1, 20001)) + b"\0" * 3_000_000
    assert result.status.exit_code == 0
    assert result.stderr == expected_err
    assert result.stdout == expected_out


def test_stdin_is_written_then_closed(workspace: Path) -> None:
    data = os.urandom(2_000_000)
    with docker_runner() as runner:
        echoed = run(runner, ["cat"], policy(workspace), stdin=data)
        counted = sh(runner, "wc -c; read -r x || echo EOF", policy(workspace), stdin=b"abc")
        no_stdin = run(runner, ["cat"], policy(workspace))
    assert echoed.status.exit_code == 0 and echoed.stdout == data
    assert counted.stdout == b"3\nEOF\n"
    assert no_stdin.status.exit_code == 0 and no_stdin.stdout == b""


ODD_ARGS = ["a b", "", "  ", "$HOME", "`id`", "$(id)", "'single'", '"double"', "back\\slash",
            "new\nline", "tab\there", "*", "-n", "--", "ü✓", ";", "&&", "|"]


def test_argv_round_trips_exactly(workspace: Path) -> None:
    with docker_runner() as runner:
        result = run(runner, ["printf", "[%s]\\0", *ODD_ARGS], policy(workspace))
    assert result.status.exit_code == 0, result.stderr
    assert result.stdout.split(b"\0")[:-1] == [f"[{a}]".encode() for a in ODD_ARGS]


def test_utf8_bytes_argv_is_decoded(workspace: Path) -> None:
    with docker_runner() as runner:
        result = run(runner, [b"printf", b"%s", "ü✓".encode()], policy(workspace))
    assert result.stdout == "ü✓".encode()


def test_non_utf8_argv_arrives_byte_for_byte(workspace: Path) -> None:
    # Docker's JSON API would turn these bytes into U+FFFD; the wrapper rebuilds them.
    odd = [b"\xff\xfe-\x80", "x\udcff".encode("utf-8", "surrogateescape"), b"%s\\n%%",
           b"-n", b"", b"trailing\n\n", "ü".encode(), b"\x01\x7f\x80 sp"]
    with docker_runner() as runner:
        result = run(runner, [b"printf", b"[%s]\\0", *odd], policy(workspace))
        surrogate = run(runner, ["printf", "%s", "x\udcff"], policy(workspace))
    assert result.status.exit_code == 0, result.stderr
    assert result.stdout.split(b"\0")[:-1] == [b"[" + a + b"]" for a in odd]
    assert surrogate.stdout == b"x\xff"  # a surrogate-escaped str means its original byte


@pytest.mark.parametrize("argv, env", [
    (["echo", "nul\0byte"], {}),
    ([], {}),
    (["true"], {"BAD": "\udcff"}),
    (["true"], {"A=B": "x"}),
])
def test_what_no_exec_can_carry_is_refused(workspace: Path, argv: list[str],
                                           env: dict[str, str]) -> None:
    with docker_runner() as runner, pytest.raises(UsageError):
        runner.prepare(argv, policy(workspace), cwd=str(workspace), env=env)


def test_env_is_exact_and_marker_is_the_only_addition(workspace: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "ODD": "a b=c\n$x", "EMPTY": ""}
    with docker_runner() as runner:
        result = run(runner, ["env", "-0"], policy(workspace), env=env)
    entries = dict(e.split("=", 1) for e in result.stdout.decode().split("\0") if e)
    marker = entries.pop("DSH_SANDBOX_EXEC")
    assert len(marker) == 32
    assert {k: entries[k] for k in env} == env


def test_cwd_is_honoured_and_must_be_visible(workspace: Path, tmp_path: Path) -> None:
    sub = workspace / "sub dir"
    sub.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    with docker_runner() as runner:
        assert run(runner, ["pwd"], policy(workspace), cwd=sub).stdout == f"{sub}\n".encode()
        with pytest.raises(WorkdirError, match="not inside the workspace"):
            runner.prepare(["pwd"], policy(workspace), cwd=str(outside), env={})
        with pytest.raises(WorkdirError, match="not a directory"):
            runner.prepare(["pwd"], policy(workspace), cwd=str(workspace / "nope"), env={})


def test_missing_program_is_exit_127(workspace: Path) -> None:
    with docker_runner() as runner:
        result = run(runner, ["no-such-program-dsh"], policy(workspace))
    assert result.status.exit_code == 127
    assert b"no-such-program-dsh" in result.stderr


def test_one_warm_container_per_shape(workspace: Path) -> None:
    with docker_runner() as runner:
        first = run(runner, ["cat", "/proc/1/stat"], policy(workspace)).stdout
        again = run(runner, ["cat", "/proc/1/stat"], policy(workspace)).stdout
        assert first == again  # same init process: the container was reused
        assert len(runner._warm) == 1
        old = [w.id for w in runner._warm.values()]
        run(runner, ["true"], policy(workspace, network=True))
        # Network is part of the container's shape: a new one, and the idle old one removed.
        assert len(runner._warm) == 1 and [w.id for w in runner._warm.values()] != old
