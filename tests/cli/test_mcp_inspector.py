"""``dsh-sandbox mcp`` driven by a client it was not written with: the MCP
Inspector's CLI mode (``@modelcontextprotocol/inspector``, from the npm
registry), over stdio and over streamable HTTP with a bearer token.

Each Inspector call is one client session: it lists the tools, calls
``bash`` (a write outside the workspace gets the denial marker), starts a
background job or opens a terminal, and when it exits, or is killed in the
middle of a call, nothing it started is left running.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import dsh_home_for
from tests.support.processes import describe, pids_with
from tests.support.sandboxed import need_runner
from tests.support.wait import wait_until

#: The Inspector release the tests drive (its CLI mode's flags changed across releases).
VERSION = "2.12.0"
#: Installed once per machine and reused: a download of the registry's package.
PREFIX = Path(f"/var/tmp/dsh-test-mcp-inspector-{VERSION}")
TOKEN = "t-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def inspector() -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("SANDBOX_UNAVAILABLE: node and npm are needed to run the MCP Inspector")
    # Debian 12's Node.js 18 lacks the CustomEvent global the Inspector uses
    # (it declares Node >= 22.19; Node 20 runs it): the exact feature is probed.
    probe = subprocess.run([node, "-e", "new CustomEvent('probe'); console.log(process.version)"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60,
                                 check=False).stdout.strip()
        pytest.skip(f"SANDBOX_UNAVAILABLE: node {version} has no CustomEvent, which the MCP Inspector {VERSION} "
                    "needs: install Node.js 20 or newer")
    binary = PREFIX / "node_modules" / ".bin" / "mcp-inspector"
    if binary.exists():
        return binary
    staging = PREFIX.with_name(f"{PREFIX.name}.{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(staging),
                           f"@modelcontextprotocol/inspector@{VERSION}"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"npm could not install the MCP Inspector from the registry: {done.stderr}"
    try:
        os.replace(staging, PREFIX)
    except OSError:  # another test process installed it meanwhile
        shutil.rmtree(staging)
    return binary


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "DSH_HOME": str(dsh_home_for(tmp_path)), "DSH_MCP_TOKEN": TOKEN}


def _server(workspace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-P", "-m", "dsh.cli", "mcp", "--runner", "bwrap", "--workspace", str(workspace),
            *extra]


def call(inspector: Path, target: list[str], method: str, *args: str, env: dict[str, str],
         cwd: Path) -> Any:
    done = subprocess.run([str(inspector), "--cli", *target, "--method", method, *args], capture_output=True,
                          text=True, timeout=180, cwd=cwd, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def tool_args(**args: str) -> list[str]:
    out = []
    for key, value in args.items():
        out += ["--tool-arg", f"{key}={value}"]
    return out


def text(result: Any) -> str:
    assert result["content"][0]["type"] == "text", result
    return str(result["content"][0]["text"])


@pytest.fixture
def http_server(workspace: Path, tmp_path: Path) -> Iterator[str]:
    need_runner("bwrap")
    proc = subprocess.Popen([*_server(workspace, "--http", "127.0.0.1:0", "--idle-timeout", "3")], cwd=workspace,
                            env=_env(tmp_path), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", line)
        assert found, line
        yield found.group(0)
    finally:
        proc.kill()
        proc.wait()


def _target(transport: str, workspace: Path, request: pytest.FixtureRequest) -> list[str]:
    """What the Inspector is pointed at: the server's command line, or its URL and the token."""
    need_runner("bwrap")
    if transport == "stdio":
        return _server(workspace)
    return [request.getfixturevalue("http_server"), "--header", f"Authorization: Bearer {TOKEN}"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_inspector_lists_the_tools_and_gets_the_denial_marker(
    transport: str, inspector: Path, workspace: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(transport, workspace, request)
    env = _env(tmp_path)
    listed = call(inspector, target, "tools/list", env=env, cwd=workspace)
    names = {tool["name"] for tool in listed["tools"]}
    assert {"bash", "job_output", "job_kill", "terminal_open", "terminal_send", "terminal_close"} <= names
    ran = call(inspector, target, "tools/call", "--tool-name", "bash",
               *tool_args(command="echo inside > in.txt; echo x > /etc/dsh-inspector-nope", description="d"),
               env=env, cwd=workspace)
    assert "[sandbox: file access denied under workspace-write mode]" in text(ran), ran
    assert (workspace / "in.txt").read_text() == "inside\n"
    assert not Path("/etc/dsh-inspector-nope").exists()


def test_the_inspector_without_the_token_gets_nothing(inspector: Path, http_server: str, workspace: Path,
                                                      tmp_path: Path) -> None:
    done = subprocess.run([str(inspector), "--cli", http_server, "--header", "Authorization: Bearer wrong-token-x",
                           "--method", "tools/list"], capture_output=True, text=True, timeout=120,
                          cwd=workspace, env=_env(tmp_path), stdin=subprocess.DEVNULL, check=False)
    assert '"tools"' not in done.stdout, done.stdout
    assert "bash" not in done.stdout


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_job_and_a_terminal_end_with_the_inspectors_session(
    transport: str, inspector: Path, workspace: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(transport, workspace, request)
    env = _env(tmp_path)
    mark = f"9{secrets.randbelow(10**6):06d}.{secrets.randbelow(10**6):06d}"
    job = call(inspector, target, "tools/call", "--tool-name", "bash",
               *tool_args(command=f"sleep {mark}", description="job", run_in_background="true"),
               env=env, cwd=workspace)
    assert "started in the background" in text(job), job
    opened = call(inspector, target, "tools/call", "--tool-name", "terminal_open", *tool_args(name="t"),
                  env=env, cwd=workspace)
    assert "[terminal: opened" in text(opened), opened
    # stdio: the server exits with its client; HTTP: the session ends (DELETE, or idle after 3 s).
    wait_until(lambda: not pids_with(mark), lambda: describe(pids_with(mark)), timeout=60)


def test_killing_the_inspector_in_a_call_leaves_no_process(inspector: Path, workspace: Path,
                                                          tmp_path: Path) -> None:
    need_runner("bwrap")
    mark = f"9{secrets.randbelow(10**6):06d}.{secrets.randbelow(10**6):06d}"
    client = subprocess.Popen([str(inspector), "--cli", *_server(workspace), "--method", "tools/call",
                               "--tool-name", "bash", *tool_args(command=f"sleep {mark}", description="fg")],
                              cwd=workspace, env=_env(tmp_path), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: any(b"sleep\0" + mark.encode() in _cmdline(p) for p in pids_with(mark)),
                   "the call's sleep to start")
        os.killpg(client.pid, signal.SIGKILL)
        wait_until(lambda: not pids_with(mark), lambda: describe(pids_with(mark)))
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
        client.wait()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
