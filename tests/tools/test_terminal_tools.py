"""The terminal tools and the persistent shells, through ``call_tool`` as a model calls them."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from dsh.tools.toolbox import call_tool, export_specs

from tests.support.processes import describe, pids_with
from tests.support.terminals import TERMINAL_RUNNERS, terminal_ctx

PERSISTENT = ({"id": "persistent-shells", "name": "persistent-shells", "config": {}},)
TERMINAL_NAMES = {"terminal_open", "terminal_send", "terminal_read", "terminal_signal", "terminal_close",
                  "terminal_list"}


def test_specs_list_the_terminal_tools_in_both_formats(workspace: Path) -> None:
    with terminal_ctx(workspace, "bwrap", extra=PERSISTENT) as ctx:
        openai = {spec["function"]["name"]: spec for spec in export_specs(ctx, "openai")}
        anthropic = {spec["name"]: spec for spec in export_specs(ctx, "anthropic")}
    assert TERMINAL_NAMES <= set(openai) and TERMINAL_NAMES <= set(anthropic)
    assert "persistent" in anthropic["bash"]["description"]  # the persistent bash replaced the one-shot
    assert anthropic["terminal_send"]["input_schema"]["properties"]["signal"]["enum"] == [
        "SIGINT", "SIGTERM", "SIGKILL", "SIGTSTP", "SIGHUP"]
    assert "sandbox_permissions" in anthropic["bash"]["input_schema"]["properties"]


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_persistent_bash_keeps_cd_and_export(workspace: Path, runner: str) -> None:
    (workspace / "sub").mkdir()
    with terminal_ctx(workspace, runner, extra=PERSISTENT) as ctx:
        first = call_tool(ctx, "bash", {"command": "cd sub && export KEPT=yes", "description": "d"}, owner="a")
        assert not first.is_error and first.content == "", first.content
        second = call_tool(ctx, "bash", {"command": 'echo "$KEPT $(basename "$PWD")"; false',
                                         "description": "d"}, owner="a")
        assert second.content == "yes sub\n[exit code: 1]", second.content
        # Another owner has its own shell.
        other = call_tool(ctx, "bash", {"command": 'echo "[$KEPT]"', "description": "d"}, owner="b")
        assert other.content.rstrip("\n") == "[]", other.content
        # Multi-line text, quotes and markers-lookalikes run exactly.
        text = call_tool(ctx, "bash", {"command": "printf '%s\\n' \"a'b\" '__DSH_PERSISTENT_BASH_END_x:3'\necho two",
                                       "description": "d"}, owner="a")
        assert text.content.rstrip("\n") == "a'b\n__DSH_PERSISTENT_BASH_END_x:3\ntwo", text.content


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_a_link_a_persistent_shell_plants_in_a_git_dir_is_removed_after_the_command(
    workspace: Path, trusted_dir: Path, runner: str
) -> None:
    """The shell lives on after a command, and so would a link it made at a
    name git writes through (``COMMIT_EDITMSG`` pointing outside): the host's
    next commit must not find it, so it goes when the command ends."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(workspace / "r")], check=True)
    target = trusted_dir / "outside"
    target.write_text("ORIGINAL\n")
    with terminal_ctx(workspace, runner, extra=PERSISTENT) as ctx:
        got = call_tool(ctx, "bash", {"command": f"ln -s {target} r/.git/COMMIT_EDITMSG; echo planted",
                                      "description": "d"}, owner="a")
        link = workspace / "r" / ".git" / "COMMIT_EDITMSG"
        assert got.content.startswith("planted\n"), got.content
        assert "removed 1 link(s)" in got.content and str(link) in got.content, got.content
        assert not link.is_symlink()
        kept = call_tool(ctx, "bash", {"command": "ln -s x r/notgit; echo ok", "description": "d"}, owner="a")
        assert kept.content.rstrip("\n") == "ok", kept.content  # links elsewhere are the command's business
        assert (workspace / "r" / "notgit").is_symlink()
        # What the shell left running plants after its command returned: the
        # next command's end removes it (judged since the shell opened).
        call_tool(ctx, "bash", {"command": f"(sleep 1; ln -s {target} r/.git/FETCH_HEAD) & echo bg",
                                "description": "d"}, owner="a")
        late = call_tool(ctx, "bash", {"command": "sleep 3; echo later", "description": "d"}, owner="a")
        assert "removed 1 link(s)" in late.content and "FETCH_HEAD" in late.content, late.content
        assert not (workspace / "r" / ".git" / "FETCH_HEAD").is_symlink()
    assert target.read_text() == "ORIGINAL\n"


@pytest.mark.parametrize("runner", TERMINAL_RUNNERS)
def test_a_repository_a_persistent_shell_makes_is_reported(workspace: Path, runner: str) -> None:
    """A repository the shell makes (a planted fsmonitor the host's next git
    status runs) is reported after the command that made it, once; one that
    what the shell left running makes between two commands, after the next."""
    planted = "git init -q {name} && git -C {name} config core.fsmonitor 'touch /tmp/pwned'"
    with terminal_ctx(workspace, runner, extra=PERSISTENT) as ctx:
        made = call_tool(ctx, "bash", {"command": planted.format(name="sub") + "; echo made",
                                       "description": "d"}, owner="a")
        assert "created or changed" in made.content and f"{workspace}/sub/.git/config" in made.content, made.content
        quiet = call_tool(ctx, "bash", {"command": "echo quiet", "description": "d"}, owner="a")
        assert quiet.content.rstrip("\n") == "quiet", quiet.content  # judged since the last command
        call_tool(ctx, "bash", {"command": "(sleep 1; " + planted.format(name="late") + ") & echo bg",
                                "description": "d"}, owner="a")
        later = call_tool(ctx, "bash", {"command": "sleep 3; echo later", "description": "d"}, owner="a")
        assert f"{workspace}/late/.git/config" in later.content, later.content
        assert f"{workspace}/sub/.git/config" not in later.content, later.content


def test_persistent_bash_exit_and_timeout_start_fresh(workspace: Path) -> None:
    with terminal_ctx(workspace, "bwrap", extra=PERSISTENT) as ctx:
        call_tool(ctx, "bash", {"command": "export GONE=1", "description": "d"}, owner="a")
        ended = call_tool(ctx, "bash", {"command": "exit 3", "description": "d"}, owner="a")
        assert "next call starts a fresh one" in ended.content
        fresh = call_tool(ctx, "bash", {"command": 'echo "[$GONE]"', "description": "d"}, owner="a")
        assert fresh.content.rstrip("\n") == "[]", fresh.content
        call_tool(ctx, "bash", {"command": "export GONE=2", "description": "d"}, owner="a")
        slow = call_tool(ctx, "bash", {"command": "echo before; sleep 1000", "description": "d",
                                       "timeout_ms": 2000}, owner="a")
        assert slow.content.startswith("before\n[timed out after 2000ms]"), slow.content
        again = call_tool(ctx, "bash", {"command": 'echo "[$GONE]"', "description": "d"}, owner="a")
        assert again.content.rstrip("\n") == "[]", again.content


def test_persistent_bash_returns_partial_output_of_a_reader(workspace: Path) -> None:
    with terminal_ctx(workspace, "bwrap", extra=PERSISTENT) as ctx:
        got = call_tool(ctx, "bash", {"command": "echo asking; read answer; echo never", "description": "d"},
                        owner="a")
        assert got.content.startswith("asking\n"), got.content
        assert "waits for input" in got.content and "never" not in got.content


@pytest.mark.parametrize("runner", ["bwrap", "docker"])
def test_terminal_tools_end_to_end(workspace: Path, runner: str) -> None:
    mark = f"dsh-tool-{secrets.token_hex(4)}"
    with terminal_ctx(workspace, runner) as ctx:
        opened = call_tool(ctx, "terminal_open", {"name": "py"}, owner="a")
        assert "opened term-1" in opened.content and "wait: stdin_read" in opened.content, opened.content
        assert call_tool(ctx, "terminal_list", {}, owner="a").content.startswith("term-1 name=py 24x80 running")
        assert call_tool(ctx, "terminal_list", {}, owner="b").content == "[no terminals open]"
        foreign = call_tool(ctx, "terminal_send", {"terminal_id": "term-1", "text": "id"}, owner="b")
        assert foreign.is_error and "FOREIGN_SESSION" in foreign.content
        refused = call_tool(ctx, "terminal_signal", {"terminal_id": "term-1", "signal": "SIGKILL"}, owner="a")
        assert refused.is_error and "terminal_close" in refused.content
        call_tool(ctx, "terminal_send", {"terminal_id": "term-1", "text": f"sh -c 'sleep 1000; :' {mark} &"},
                  owner="a")
        sent = call_tool(ctx, "terminal_send", {"terminal_id": "term-1", "text": "python3 -q"}, owner="a")
        assert sent.content.split("\n[terminal")[0].endswith(">>>"), sent.content
        busy = call_tool(ctx, "terminal_send", {"terminal_id": "term-1", "text": "exec('while True: pass')",
                                                "settle_ms": 3000}, owner="a")
        assert "wait: inferred_idle" in busy.content or "wait: timeout" in busy.content, busy.content
        stopped = call_tool(ctx, "terminal_signal", {"terminal_id": "term-1", "signal": "SIGINT"}, owner="a")
        assert "KeyboardInterrupt" in stopped.content and "wait: stdin_read" in stopped.content, stopped.content
        closed = call_tool(ctx, "terminal_close", {"terminal_id": "term-1"}, owner="a")
        assert "every process it started is gone" in closed.content
        assert pids_with(mark) == [], describe(pids_with(mark))
        gone = call_tool(ctx, "terminal_read", {"terminal_id": "term-1"}, owner="a")
        assert gone.is_error and "NO_SESSION" in gone.content


@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker"])
def test_the_bash_tool_shows_stdout_and_stderr_in_the_order_written(workspace: Path, runner: str) -> None:
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done"
    with terminal_ctx(workspace, runner) as ctx:
        got = call_tool(ctx, "bash", {"command": script, "description": "d"}, owner="a")
    if runner == "docker":
        # Two streams over one socket, taken as they arrive: every line, each stream in order.
        lines = got.content.split("\n")
        assert sorted(lines) == ["err1", "err2", "err3", "out1", "out2", "out3"], got.content
        assert [x for x in lines if x.startswith("out")] == ["out1", "out2", "out3"]
    else:
        assert got.content == "out1\nerr1\nout2\nerr2\nout3\nerr3", got.content


def test_a_trusted_caller_still_gets_stdout_alone(workspace: Path) -> None:
    from dsh.executors.seam import ShellExecRequest, ShellExecutor

    with terminal_ctx(workspace, "bwrap") as ctx:
        shell = ctx.require(ShellExecutor)
        result = shell.run(shell.resolve(ShellExecRequest("echo out; echo err >&2")))
    assert (result.stdout.text, result.stderr.text) == ("out\n", "err\n")


def test_tool_call_refuses_terminal_tools_with_exit_2(workspace: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "tool", "call", "terminal_open", "{}",
                           "--workspace", str(workspace)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "long-lived" not in done.stdout, (done.stdout, done.stderr)
    assert "terminal lives until it is closed" in done.stderr and "Traceback" not in done.stderr


def test_tool_spec_with_a_composition_lists_the_terminal_tools(workspace: Path, trusted_dir: Path) -> None:
    import json
    import subprocess
    import sys

    comp = trusted_dir / "comp.yaml"
    comp.write_text(
        "- {id: policy, name: sandbox-policy, config: {workspace: '" + str(workspace) + "'}}\n"
        "- {id: sandbox, name: sandbox, config: {runner: bwrap}}\n"
        "- {id: shell, name: bash-sandbox}\n- {id: terminals, name: terminals}\n"
        "- {id: terminal-bash, name: terminal-bash}\n- {id: persistent-shells, name: persistent-shells}\n")
    done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "tool", "spec", "--format", "anthropic",
                           "--composition", str(comp)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    names = {tool["name"] for tool in json.loads(done.stdout)}
    assert TERMINAL_NAMES | {"bash"} <= names
