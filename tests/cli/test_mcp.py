"""``dsh-sandbox mcp``: the real server process, driven by the MCP SDK's own client over stdio,
on real runners; what a client sees is what ``tool call`` prints."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.cli import dsh_home_for
from tests.support.processes import describe, pids_where, pids_with
from tests.support.sandboxed import accept_for, need_runner
from tests.support.wait import wait_until


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DSH_HOME"] = str(dsh_home_for(tmp_path))
    return env


def _flags(runner: str, workspace: Path) -> list[str]:
    flags = ["--runner", runner, "--workspace", str(workspace)]
    for name in accept_for(runner):
        flags += ["--accept-degraded", name]
    return flags


def _server(args: list[str], workspace: Path, tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-P", "-m", "dsh.cli", "mcp", *args],
                                 env=_env(tmp_path), cwd=str(workspace))


def with_client(params: StdioServerParameters, scenario: Callable[[Client], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with Client(params) as client:
                return await scenario(client)

    return anyio.run(main)


def tool_call(name: str, args: dict[str, Any], flags: list[str], workspace: Path,
              tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "tool", "call", name, json.dumps(args), *flags],
                          capture_output=True, text=True, timeout=120, cwd=workspace, env=_env(tmp_path),
                          check=False)


def text_of(result: Any) -> str:
    assert [c.type for c in result.content] == ["text"]
    return str(result.content[0].text)


def test_tools_are_those_tool_spec_prints_for_the_same_session(workspace: Path, tmp_path: Path,
                                                               trusted_dir: Path) -> None:
    """The flags' session is the composition below; ``tool spec`` of that composition
    prints the same names, descriptions and input schemas as the server lists."""
    need_runner("bwrap")
    composition = trusted_dir / "mcp-session.yaml"
    composition.write_text(textwrap.dedent(f"""\
        - {{id: policy, name: sandbox-policy, config: {{workspace: {workspace}}}}}
        - {{id: sandbox, name: sandbox, config: {{runner: bwrap}}}}
        - {{id: shell, name: bash-sandbox}}
        - {{id: approval, name: approval-deny}}
        - {{id: jobs, name: jobs}}
        - {{id: terminals, name: terminals}}
        - {{id: terminal-bash, name: terminal-bash}}
        """))
    printed = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "tool", "spec", "--format", "anthropic",
                              "--composition", str(composition)], capture_output=True, text=True,
                             timeout=120, cwd=workspace, env=_env(tmp_path), check=False)
    assert printed.returncode == 0, printed.stderr
    expected = [(t["name"], t["description"], t["input_schema"]) for t in json.loads(printed.stdout)]

    async def listed(client: Client) -> list[tuple[str, str | None, dict[str, Any]]]:
        return [(t.name, t.description, t.input_schema) for t in (await client.list_tools()).tools]

    assert with_client(_server(_flags("bwrap", workspace), workspace, tmp_path), listed) == expected
    names = [name for name, _, _ in expected]
    assert names == ["bash", "job_output", "job_kill", "terminal_open", "terminal_send", "terminal_read",
                     "terminal_signal", "terminal_close", "terminal_list"]
    assert {"run_in_background", "sandbox_permissions", "justification"} <= set(expected[0][2]["properties"])


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_bash_renders_as_tool_call_and_a_write_outside_is_denied(runner: str, workspace: Path, tmp_path: Path,
                                                                 trusted_dir: Path) -> None:
    need_runner(runner)
    outside = trusted_dir / "outside"
    calls = [
        {"command": "echo hi", "description": "say hi"},
        {"command": f"echo x > {shlex.quote(str(outside))}", "description": "write outside"},
    ]

    async def scenario(client: Client) -> list[tuple[str, bool]]:
        return [(text_of(r), bool(r.is_error)) for r in [await client.call_tool("bash", c) for c in calls]]

    flags = _flags(runner, workspace)
    (hi, hi_error), (denied, denied_error) = with_client(_server(flags, workspace, tmp_path), scenario)
    assert (hi, hi_error) == ("hi", False)
    assert "[sandbox: file access denied under workspace-write mode]" in denied, denied
    assert not denied_error  # the command ran; the sandbox said no
    assert not outside.exists()
    # Byte for byte what `tool call` prints for the same calls (click adds the newline).
    for args, shown in zip(calls, (hi, denied), strict=True):
        done = tool_call("bash", args, flags, workspace, tmp_path)
        assert done.stdout == shown + "\n", done.stderr
    assert not outside.exists()


def test_a_host_outside_the_allowlist_gets_a_marker(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    # Nothing listens on 127.0.0.2: the refusal is the proxy's, before any connection.
    call = {"command": "curl -sS http://127.0.0.2:9/ || python3 -c \"import urllib.request as u; "
                       "u.urlopen('http://127.0.0.2:9/')\"", "description": "fetch"}

    async def scenario(client: Client) -> str:
        return text_of(await client.call_tool("bash", call))

    flags = ["--runner", "bwrap", "--workspace", str(workspace), "--allow-domain", "pypi.org"]
    shown = with_client(_server(flags, workspace, tmp_path), scenario)
    assert shown.endswith("[sandbox: network access to 127.0.0.2 denied]"), shown


def test_escalation_is_denied_by_default_and_logged(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    outside = trusted_dir / "outside"
    args = {"command": f"echo x > {shlex.quote(str(outside))}", "description": "write outside",
            "sandbox_permissions": "danger-full-access", "justification": "the test asks"}

    async def scenario(client: Client) -> tuple[str, bool]:
        result = await client.call_tool("bash", args)
        return text_of(result), bool(result.is_error)

    flags = _flags("bwrap", workspace)
    shown, is_error = with_client(_server(flags, workspace, tmp_path), scenario)
    assert not outside.exists()
    done = tool_call("bash", args, flags, workspace, tmp_path)
    assert (done.stdout, done.returncode == 1) == (shown + "\n", is_error), done.stderr
    records = [json.loads(line) for line in
               (dsh_home_for(tmp_path) / "escalations.jsonl").read_text().splitlines()]
    assert [(r["decision"], r["provider"], r["command"]) for r in records] == \
        [("deny", "approval-deny", args["command"])] * 2


@pytest.mark.parametrize("decision", ["once", "deny"])
def test_elicit_asks_the_client_and_logs_its_answer(decision: str, workspace: Path, tmp_path: Path,
                                                    trusted_dir: Path) -> None:
    """``--approval elicit``: the client's user answers (here the SDK client's
    elicitation callback); the answer decides, and the log records it."""
    need_runner("bwrap")
    outside = trusted_dir / "outside"
    command = f"echo x > {shlex.quote(str(outside))}"
    asked: list[str] = []

    async def answer(_context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": decision})

    async def main() -> str:
        with anyio.fail_after(120):
            params = _server([*_flags("bwrap", workspace), "--approval", "elicit"], workspace, tmp_path)
            # The handshake era has the back channel elicitation needs on stdio.
            async with Client(params, mode="legacy", elicitation_callback=answer) as client:
                return text_of(await client.call_tool("bash", {
                    "command": command, "description": "write outside",
                    "sandbox_permissions": "danger-full-access", "justification": "the test asks"}))

    shown = anyio.run(main)
    assert len(asked) == 1 and command in asked[0] and "danger-full-access" in asked[0], asked
    records = [json.loads(line) for line in
               (dsh_home_for(tmp_path) / "escalations.jsonl").read_text().splitlines()]
    assert [(r["provider"], r["command"]) for r in records] == [("approval-elicit", command)]
    if decision == "once":
        assert records[0]["decision"] == "approve_once"
        assert "after approval (once)" in shown and outside.read_text() == "x\n", shown
    else:
        assert records[0]["decision"] == "deny" and "denied by the MCP client's user" in shown, shown
        assert not outside.exists()


def test_elicit_denies_when_the_client_cannot_be_asked(workspace: Path, tmp_path: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    outside = trusted_dir / "outside"

    async def scenario(client: Client) -> str:  # no elicitation callback: not offered
        return text_of(await client.call_tool("bash", {
            "command": f"echo x > {shlex.quote(str(outside))}", "description": "write outside",
            "sandbox_permissions": "danger-full-access", "justification": "the test asks"}))

    shown = with_client(_server([*_flags("bwrap", workspace), "--approval", "elicit"], workspace, tmp_path),
                        scenario)
    assert "the MCP client cannot be asked" in shown and not outside.exists(), shown


def test_elicit_is_refused_where_there_is_no_client(workspace: Path, tmp_path: Path) -> None:
    for argv in (["run", "--approval", "elicit", "--", "true"],
                 ["tool", "call", "bash", '{"command": "true", "description": "x"}', "--approval", "elicit"]):
        done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", *argv], capture_output=True, text=True,
                              timeout=120, cwd=workspace, env=_env(tmp_path), check=False)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "--approval elicit: only dsh-sandbox mcp" in done.stderr and "Traceback" not in done.stderr


def test_calls_run_concurrently(workspace: Path, tmp_path: Path) -> None:
    """Two calls that each wait for the other's file: both finish only if they run at once."""
    need_runner("bwrap")
    calls = [("a", "b"), ("b", "a")]

    async def scenario(client: Client) -> list[str]:
        shown: list[str] = []

        async def call(mine: str, theirs: str) -> None:
            shown.append(text_of(await client.call_tool("bash", {
                "command": f"touch {mine}; until [ -e {theirs} ]; do sleep 0.02; done; echo {mine} saw {theirs}",
                "description": "meet", "timeout_ms": 100_000})))

        async with anyio.create_task_group() as group:
            for mine, theirs in calls:
                group.start_soon(call, mine, theirs)
        return shown

    shown = with_client(_server(_flags("bwrap", workspace), workspace, tmp_path), scenario)
    assert sorted(shown) == ["a saw b", "b saw a"]


def test_the_sdk_is_imported_only_by_the_server() -> None:
    code = ("import sys; from dsh.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'anyio')))")
    for argv in (["mcp", "--help"], ["mcp", "--print-config", "cursor"], ["--help"], ["run", "--help"]):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.stdout.splitlines()[-1] == "[]", (argv, done.stdout, done.stderr)


def test_a_job_and_a_terminal_live_as_long_as_the_session(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")

    async def scenario(client: Client) -> dict[str, str]:
        started = text_of(await client.call_tool("bash", {
            "command": "echo first; sleep 0.2; echo done", "description": "bg", "run_in_background": True}))
        job_id = started.split("[job ", 1)[1].split(" ", 1)[0]
        output = text_of(await client.call_tool("job_output", {"job_id": job_id, "wait_ms": 60_000}))
        opened = text_of(await client.call_tool("terminal_open", {"name": "t"}))
        term = opened.split("[terminal ", 1)[1].split(" ", 1)[0]
        sent = text_of(await client.call_tool("terminal_send", {"terminal_id": term, "text": "echo $((6*7))"}))
        listed = text_of(await client.call_tool("terminal_list", {}))
        closed = text_of(await client.call_tool("terminal_close", {"terminal_id": term}))
        after = text_of(await client.call_tool("terminal_list", {}))
        return {"started": started, "output": output, "sent": sent, "listed": listed, "closed": closed,
                "after": after, "term": term}

    seen = with_client(_server(_flags("bwrap", workspace), workspace, tmp_path), scenario)
    assert "started in the background" in seen["started"]
    assert "first\ndone" in seen["output"], seen["output"]
    assert "42" in seen["sent"], seen["sent"]
    assert seen["term"] in seen["listed"]
    assert seen["term"] not in seen["after"], seen["after"]
    assert "session_exit" in seen["closed"] or "closed" in seen["closed"], seen["closed"]


def test_persistent_bash_keeps_cwd_and_exports(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    (workspace / "sub").mkdir()

    async def scenario(client: Client) -> list[str]:
        return [text_of(await client.call_tool("bash", {"command": command, "description": "step"}))
                for command in ("cd sub && export DSH_MCP_X=kept", "pwd; echo $DSH_MCP_X")]

    shown = with_client(_server([*_flags("bwrap", workspace), "--persistent"], workspace, tmp_path), scenario)
    assert shown[1].splitlines()[:2] == [str(workspace / "sub"), "kept"], shown


CLIENT = """
import anyio, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main():
    params = StdioServerParameters(command=sys.executable, args=sys.argv[2:], cwd=sys.argv[1])
    async with Client(params) as client:
        mark = {mark!r}
        job = await client.call_tool("bash", {{"command": f"sleep {{mark}}; true", "description": "job",
                                               "run_in_background": True}})
        opened = await client.call_tool("terminal_open", {{"name": "t"}})
        term = opened.content[0].text.split("[terminal ", 1)[1].split(" ", 1)[0]
        sent = await client.call_tool("terminal_send", {{"terminal_id": term, "text": f"sleep {{mark}}1; true",
                                                        "settle_ms": 0}})
        print("READY", flush=True)
        for result in (job, opened, sent):
            print(result.content[0].text, file=sys.stderr, flush=True)
        # A foreground call still running when the client goes.
        await client.call_tool("bash", {{"command": f"sleep {{mark}}2; true", "description": "fg",
                                         "timeout_ms": 600000}})
        await anyio.sleep_forever()

anyio.run(main)
"""


@pytest.mark.parametrize(("how", "runner"), [
    ("client-killed", "bwrap"), ("client-killed", "landlock"), ("client-killed", "docker"),
    ("server-sigterm", "bwrap"),
])
def test_the_session_ending_leaves_no_process(how: str, runner: str, workspace: Path, tmp_path: Path) -> None:
    """SIGKILL of the client's process group closes the server's stdin; SIGTERM
    stops the server: either way the job, the terminal and a call still running
    are gone from /proc."""
    need_runner(runner)
    mark = f"9{secrets.randbelow(10**6):06d}.{secrets.randbelow(10**6):06d}"  # a unique sleep length
    server_argv = ["-P", "-m", "dsh.cli", "mcp", *_flags(runner, workspace)]

    def servers() -> list[int]:
        return pids_where(lambda cmdline: cmdline.split(b"\0")[1:] == [os.fsencode(a) for a in server_argv] + [b""])

    client = subprocess.Popen([sys.executable, "-c", CLIENT.format(mark=mark), str(workspace), *server_argv],
                              stdout=subprocess.PIPE, env=_env(tmp_path), start_new_session=True)
    try:
        assert client.stdout is not None
        assert client.stdout.readline() == b"READY\n"
        # The sandboxed commands themselves: the job's sleep, the terminal's and the foreground call's.
        sleeps = {b"sleep\0" + mark.encode() + end for end in (b"\0", b"1\0", b"2\0")}
        wait_until(lambda: len(pids_where(lambda cmdline: cmdline in sleeps)) == 3,
                   "the job's, the terminal's and the foreground call's sleep")
        server = servers()
        assert len(server) == 1, describe(server)
        if how == "client-killed":
            os.killpg(client.pid, signal.SIGKILL)
        else:
            os.kill(server[0], signal.SIGTERM)
        def left() -> list[int]:  # the client's own command line holds the mark too
            return [pid for pid in pids_with(mark) if pid != client.pid]

        wait_until(lambda: not left(), lambda: describe(left()))
        wait_until(lambda: not servers(), lambda: describe(servers()))
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
        client.wait()


@pytest.mark.parametrize(("args", "says"), [
    (["--mode", "bogus"], "--mode"),
    (["--max-concurrent-calls", "0"], "--max-concurrent-calls"),
    (["--approval", "sometimes"], "--approval 'sometimes': use deny, prompt or rules:FILE"),
    (["--approval", "prompt"], "--approval prompt: the MCP server has no terminal"),
    (["--print-config", "vim"], "--print-config"),
    (["--persistent", "--composition", "/nonexistent.yaml"], "--persistent conflicts with --composition"),
])
def test_bad_options_exit_2_without_a_traceback(args: list[str], says: str, workspace: Path,
                                               tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--workspace", str(workspace), *args],
                          capture_output=True, text=True, timeout=120, cwd=workspace, env=_env(tmp_path),
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def test_print_config_for_each_client(workspace: Path, tmp_path: Path) -> None:
    flags = ["--profile", "python", "--workspace", ".", "--approval", "rules:rules.toml", "--env", "A=b c",
             "--allow-domain", "pypi.org", "--allow-domain", "*.example.com", "--deny-domain", "up.example.com"]
    expected = ["mcp", "--profile", "python", "--workspace", str(workspace), "--approval",
                f"rules:{workspace}/rules.toml", "--env", "A=b c", "--allow-domain", "pypi.org",
                "--allow-domain", "*.example.com", "--deny-domain", "up.example.com"]

    def printed(client: str) -> str:
        done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--print-config", client, *flags],
                              capture_output=True, text=True, timeout=120, cwd=workspace, env=_env(tmp_path),
                              check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    command = [sys.executable, "-P", "-m", "dsh.cli"]  # run with -m: the interpreter, by absolute path
    claude = [line for line in printed("claude").splitlines() if not line.startswith("#")]
    assert shlex.split(claude[0]) == ["claude", "mcp", "add", "dsh-sandbox", "--", *command, *expected]
    codex = tomllib.loads(printed("codex"))["mcp_servers"]["dsh-sandbox"]
    assert [codex["command"], *codex["args"]] == [*command, *expected]
    cursor = json.loads(printed("cursor"))["mcpServers"]["dsh-sandbox"]
    assert [cursor["command"], *cursor["args"]] == [*command, *expected]
    assert os.path.isabs(cursor["command"])
