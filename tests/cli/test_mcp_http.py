"""``dsh-sandbox mcp --http``: the real server process over streamable HTTP,
driven by the MCP SDK's own client: the bearer token, the Host check on
loopback, one session per client (its jobs are its own), and nothing left
running once a session ends, by the client's DELETE, by going idle, or by
the server stopping."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.support.cli import dsh_home_for
from tests.support.processes import describe, pids_with
from tests.support.sandboxed import need_runner
from tests.support.wait import wait_until

TOKEN = "t-" + secrets.token_hex(16)


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url


@pytest.fixture
def server(workspace: Path, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[subprocess.Popen[str]] = []

    def start(*extra: str, runner: str = "bwrap", address: str = "127.0.0.1:0") -> Server:
        need_runner(runner)
        env = {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path)), "DSH_MCP_TOKEN": TOKEN}
        proc = subprocess.Popen([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--http", address,
                                 "--runner", runner, "--workspace", str(workspace), *extra],
                                cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"http://\S+:\d+/mcp", line)
        assert found, line + (proc.stderr.read() if proc.poll() is not None else "")
        assert "bearer token" not in line  # given in the environment: never printed
        return Server(proc, found.group(0))

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def session(url: str, scenario: Callable[[ClientSession], Awaitable[Any]], *, token: str = TOKEN,
            terminate: bool = True) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http, \
                    streamable_http_client(url, http_client=http, terminate_on_close=terminate) as (read, write), \
                    ClientSession(read, write) as client:
                await client.initialize()
                return await scenario(client)

    return anyio.run(main)


def text_of(result: Any) -> str:
    return str(result.content[0].text)


def post(url: str, headers: dict[str, str], body: bytes = b"{}") -> int:
    return exchange(url, headers, body)[0]


def exchange(url: str, headers: dict[str, str], body: bytes = b"{}") -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def test_tools_calls_and_a_denial_over_http(server: Callable[..., Server], workspace: Path) -> None:
    running = server()

    async def scenario(client: ClientSession) -> tuple[list[str], str]:
        tools = [t.name for t in (await client.list_tools()).tools]
        ran = text_of(await client.call_tool("bash", {"command": "echo hi; echo x > /etc/dsh-http-nope",
                                                      "description": "d"}))
        return tools, ran

    tools, ran = session(running.url, scenario)
    assert {"bash", "job_output", "job_kill", "terminal_open", "terminal_close"} <= set(tools)
    assert ran.startswith("hi\n") and "[sandbox: file access denied under workspace-write mode]" in ran, ran
    assert not Path("/etc/dsh-http-nope").exists()


def test_a_request_without_the_token_or_from_another_host_name_is_refused(server: Callable[..., Server]) -> None:
    running = server()
    assert post(running.url, {}) == 401
    assert post(running.url, {"Authorization": "Bearer wrong-" + TOKEN}) == 401
    assert post(running.url, {"Authorization": TOKEN}) == 401
    # DNS rebinding: a page served as evil.example whose name now resolves to 127.0.0.1.
    assert post(running.url, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}) == 421
    with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in its own exception group
        session(running.url, lambda client: client.list_tools(), token="wrong-" + TOKEN)


def _start_job(mark: str) -> Callable[[ClientSession], Awaitable[str]]:
    async def scenario(client: ClientSession) -> str:
        started = text_of(await client.call_tool("bash", {"command": f"sleep {mark}; true", "description": "job",
                                                          "run_in_background": True}))
        return started.split("[job ", 1)[1].split(" ", 1)[0]

    return scenario


def _mark() -> str:
    return f"9{secrets.randbelow(10**6):06d}.{secrets.randbelow(10**6):06d}"


def test_a_sessions_jobs_are_its_own_and_end_with_it(server: Callable[..., Server]) -> None:
    """Client A's job cannot be read by client B; A's DELETE (its session
    closing) kills A's job, not B's."""
    running = server()
    mark_a, mark_b = _mark(), _mark()

    async def a_and_b(client: ClientSession) -> tuple[str, str]:
        job_a = await _start_job(mark_a)(client)
        foreign = "unset"

        async def b(other: ClientSession) -> None:
            nonlocal foreign
            foreign = text_of(await other.call_tool("job_output", {"job_id": job_a}))
            await _start_job(mark_b)(other)

        await anyio.to_thread.run_sync(lambda: session(running.url, b, terminate=False))
        return job_a, foreign

    _job, foreign = session(running.url, a_and_b)
    assert "another agent" in foreign or "no job" in foreign, foreign
    wait_until(lambda: not pids_with(mark_a), lambda: describe(pids_with(mark_a)))
    assert pids_with(mark_b), "B's job died with A's session"


def test_a_client_that_vanishes_has_its_jobs_ended_when_idle(server: Callable[..., Server]) -> None:
    running = server("--idle-timeout", "2")
    mark = _mark()
    session(running.url, _start_job(mark), terminate=False)  # no DELETE: the client just goes
    assert pids_with(mark)
    wait_until(lambda: not pids_with(mark), lambda: describe(pids_with(mark)), timeout=30)


def test_stopping_the_server_ends_every_sessions_processes(server: Callable[..., Server]) -> None:
    running = server()
    mark = _mark()
    session(running.url, _start_job(mark), terminate=False)
    assert pids_with(mark)
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(timeout=60) == 128 + signal.SIGTERM
    wait_until(lambda: not pids_with(mark), lambda: describe(pids_with(mark)))


@pytest.mark.parametrize(("http", "token", "says"), [
    ("nonsense", TOKEN, "--http 'nonsense': the port must be a number"),
    ("127.0.0.1:70000", TOKEN, "the port must be a number from 0 to 65535"),
    ("[::1", TOKEN, "write an IPv6 address as [ADDR]:PORT"),
    ("127.0.0.1:0", "short", "DSH_MCP_TOKEN: the token must be at least 16"),
])
def test_bad_http_options_exit_2_without_a_traceback(http: str, token: str, says: str, workspace: Path,
                                                     tmp_path: Path) -> None:
    env = {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path)), "DSH_MCP_TOKEN": token}
    done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--http", http, "--workspace",
                           str(workspace)], capture_output=True, text=True, timeout=60, cwd=workspace, env=env,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_port_in_use_is_a_clear_error(workspace: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path)), "DSH_MCP_TOKEN": TOKEN}
        done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--http", f"127.0.0.1:{port}",
                               "--workspace", str(workspace)], capture_output=True, text=True, timeout=60,
                              cwd=workspace, env=env, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    assert "cannot listen there" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_token_made_here_is_printed_once(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    env = {k: v for k, v in os.environ.items() if k != "DSH_MCP_TOKEN"}
    env["DSH_HOME"] = str(dsh_home_for(tmp_path))
    proc = subprocess.Popen([sys.executable, "-P", "-m", "dsh.cli", "mcp", "--http", "0", "--runner", "bwrap",
                             "--workspace", str(workspace)], cwd=workspace, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+/mcp); bearer token: (\S+)", line)
        assert found, line
        tools = session(found.group(1), lambda client: client.list_tools(), token=found.group(2))
        assert any(t.name == "bash" for t in tools.tools)
    finally:
        proc.kill()
        proc.wait()


def test_a_request_without_an_mcp_session_is_refused(server: Callable[..., Server]) -> None:
    """Protocol 2026-07-28 requests carry no MCP session, in which this server
    keeps each client's jobs and terminals: taken, every such client would
    share one owner (and could name another's), so they are refused; a
    made-up session id is refused by the SDK."""
    running = server()
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "echo started", "description": "d", "run_in_background": True}}})
    status, text = exchange(running.url, {"Authorization": f"Bearer {TOKEN}", "MCP-Protocol-Version": "2026-07-28"},
                            call.encode())
    assert status == 400 and "has no MCP session" in text, (status, text)
    status, text = exchange(running.url, {"Authorization": f"Bearer {TOKEN}", "Mcp-Session-Id": "made-up",
                                          "MCP-Protocol-Version": "2025-11-25"}, call.encode())
    assert status == 404, (status, text)
    # The scheme is case-insensitive: a client sending "bearer" is let in.
    assert post(running.url, {"Authorization": f"bearer {TOKEN}"}) != 401


def test_a_mapped_loopback_address_still_checks_the_host_name(server: Callable[..., Server]) -> None:
    from dsh.cli.mcp_http import is_loopback

    assert is_loopback("::ffff:127.0.0.1") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("::ffff:10.0.0.1") and not is_loopback("0.0.0.0")
    running = server(address="[::ffff:127.0.0.1]:0")
    assert post(running.url, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"}) == 421
    assert post(running.url, {"Authorization": f"Bearer {TOKEN}"}) != 421
