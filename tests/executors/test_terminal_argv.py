"""The exact argv and environment of a terminal session (pwsh at the argv level: no pwsh here)."""

from __future__ import annotations

from dsh.executors.pty_launch import relay_argv
from dsh.executors.seam import TerminalSize
from dsh.executors.terminal_bash import bash_env, pwsh_argv
from dsh.tools.persistent_shell import between_markers, marker_line


def test_relay_keeps_the_argv_exact() -> None:
    argv = ("printf", "%s\n", "a b", "$HOME", b"\xff")
    wrapped = relay_argv("/usr/bin/python3", TerminalSize(10, 30), argv)
    assert wrapped[:4] == ("/usr/bin/python3", "-I", "-S", "-c")
    assert wrapped[5:] == ("--rows", "10", "--cols", "30", "--", *argv)


def test_bash_prompt_is_reasserted_before_each_prompt() -> None:
    env = bash_env("abc123")
    assert "dsh-prompt-abc123" in env["PS1"]
    assert env["PROMPT_COMMAND"].startswith("PS1='") and "dsh-prompt-abc123" in env["PROMPT_COMMAND"]


def test_pwsh_dialect_argv_and_markers() -> None:
    argv = pwsh_argv("n0nce")
    assert argv[:5] == ("pwsh", "-NoLogo", "-NoProfile", "-NoExit", "-Command")
    assert "function global:prompt" in argv[5] and "dsh-prompt-n0nce" in argv[5]
    line = marker_line("Get-ChildItem; 'x'", "n0nce", "pwsh")
    assert "__DSH_PERSISTENT_BASH_START_n0nce__" not in line  # built at run time, never echoed
    assert "FromBase64String" in line


def test_markers_are_found_and_stripped() -> None:
    raw = (b"typed line echo\r\n__DSH_PERSISTENT_BASH_START_n1__\r\nout \x1b[1mbold\x1b[0m\r\n"
           b"\r\n__DSH_PERSISTENT_BASH_END_n1:4\r\n\x1b]6973;dsh-prompt-x\x07/ws$ ")
    got = between_markers(raw, b"", 0, "n1")
    assert (got.output, got.exit_code) == ("out bold\n", 4)
    assert between_markers(b"__DSH_PERSISTENT_BASH_START_n1__\r\nhalf", b"", 0, "n1").exit_code is None
