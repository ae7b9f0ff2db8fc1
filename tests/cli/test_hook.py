"""``dsh-sandbox hook``: a harness's hooks run in the real sandbox, and their answers combine.

Real runners (bwrap, landlock, docker for a sandbox that cannot start), the real
CLI as a subprocess, the payload on a pipe as the harness sends it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.runners import nobody_python
from tests.support.sandboxed import accept_for, need_runner

PAYLOAD = {"session_id": "abc123", "transcript_path": "/nonexistent/t.jsonl", "cwd": "/ignored",
           "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
           "tool_input": {"command": "npm test", "description": "run the tests"}, "tool_use_id": "toolu_01"}


def hook(settings: Path, event: str, payload: dict[str, Any] | bytes, workspace: Path, *flags: str,
         runner: str | None = "bwrap") -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-P", "-m", "dsh.cli", "hook", "--settings", str(settings), "--event", event,
            "--workspace", str(workspace), *flags]
    if runner is not None:
        need_runner(runner)
        argv += ["--runner", runner, *[f"--accept-degraded={n}" for n in accept_for(runner)]]
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run(argv, input=data, capture_output=True, cwd=workspace, timeout=300, check=False)


def settings_file(directory: Path, hooks: dict[str, Any], name: str = "settings.json") -> Path:
    path = directory / name
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def command(text: str, timeout: float | None = None) -> dict[str, Any]:
    handler: dict[str, Any] = {"type": "command", "command": text}
    if timeout is not None:
        handler["timeout"] = timeout
    return handler


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_matching_hooks_get_the_payload_and_the_project_dir(workspace: Path, trusted_dir: Path, runner: str) -> None:
    record = 'cat > "$CLAUDE_PROJECT_DIR/{0}.json"; printf %s "$CLAUDE_PROJECT_DIR" > {0}.dir'
    settings = settings_file(trusted_dir, {"PreToolUse": [
        {"matcher": "Bash", "hooks": [command(record.format("bash"))]},
        {"matcher": "Write|Edit", "hooks": [command(record.format("edit"))]},
        {"matcher": "*", "hooks": [command(record.format("all"))]},
    ]})
    raw = json.dumps(PAYLOAD, indent=1).encode() + b"\n"
    done = hook(settings, "PreToolUse", raw, workspace, runner=runner)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    for name in ("bash", "all"):
        assert (workspace / f"{name}.json").read_bytes() == raw  # the payload, byte for byte
        assert (workspace / f"{name}.dir").read_text() == str(workspace)  # and the cwd is the project
    assert not (workspace / "edit.json").exists()


def test_the_command_is_bash_c_exactly(workspace: Path, trusted_dir: Path) -> None:
    text = """printf '%s' "$BASH_EXECUTION_STRING" > got; echo 'it''s $HOME "q"' > /dev/null"""
    settings = settings_file(trusted_dir, {"Stop": [{"hooks": [command(text)]}]})
    done = hook(settings, "Stop", {"hook_event_name": "Stop", "stop_hook_active": False}, workspace)
    assert done.returncode == 0, done.stderr
    assert (workspace / "got").read_text() == text


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_hook_cannot_write_outside_the_workspace(workspace: Path, trusted_dir: Path, runner: str) -> None:
    target = trusted_dir / "planted"
    settings = settings_file(trusted_dir, {"PostToolUse": [
        {"matcher": "Bash", "hooks": [command(f"echo x > {target}")]}]})
    done = hook(settings, "PostToolUse", PAYLOAD | {"hook_event_name": "PostToolUse"}, workspace, runner=runner)
    assert not target.exists()  # the host, afterwards
    # A non-blocking error in the harness's terms, reported with the sandbox's denial.
    assert done.returncode == 0, done.stderr
    message = json.loads(done.stdout)["systemMessage"]
    assert str(target) in message and "denied" in message, message


def test_a_blocking_hook_wins_over_an_allow(workspace: Path, trusted_dir: Path) -> None:
    allow = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
    settings = settings_file(trusted_dir, {"PreToolUse": [
        {"matcher": "Bash", "hooks": [command(f"echo '{allow}'"),
                                      command("grep -q 'npm test' && { echo 'no tests now' >&2; exit 2; }")]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert (done.returncode, done.stdout) == (2, b""), done.stderr
    assert done.stderr.startswith(b"no tests now\n")
    alone = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [command(f"echo '{allow}'")]}]}, "allow.json")
    done = hook(alone, "PreToolUse", PAYLOAD, workspace)
    assert done.returncode == 0 and json.loads(done.stdout)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_a_blocking_reason_on_a_terminal_is_shown_escaped(workspace: Path, trusted_dir: Path) -> None:
    """A person running ``hook`` at a terminal: the hook's reason, which it
    wrote itself, cannot set the clipboard or the title there.  On a pipe (a
    harness) it stays byte for byte what the hook wrote."""
    reason = r"printf 'no\033]52;c;ZXZpbA==\007\033]2;T\007 way\n' >&2; exit 2"
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [command(reason)]}]})
    piped = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert piped.returncode == 2 and piped.stderr.startswith(b"no\x1b]52;c;ZXZpbA==\x07\x1b]2;T\x07 way\n")
    need_runner("bwrap")
    main, other = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-m", "dsh.cli", "hook", "--settings", str(settings), "--event", "PreToolUse",
             "--workspace", str(workspace), "--runner", "bwrap",
             *[f"--accept-degraded={n}" for n in accept_for("bwrap")]],
            input=json.dumps(PAYLOAD).encode(), stdout=subprocess.PIPE, stderr=other, cwd=workspace, timeout=300,
            check=False)
        os.close(other)
        other = -1
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(main)
        if other >= 0:
            os.close(other)
    assert done.returncode == 2
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"no\\x1b]52;c;ZXZpbA==\\x07\\x1b]2;T\\x07 way" in shown, shown


def test_the_timeout_is_honoured_and_a_gate_blocks(workspace: Path, trusted_dir: Path) -> None:
    allow = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [
        command("sleep 60", timeout=1), command(f"echo '{allow}'")]}]})
    started = time.monotonic()
    done = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert time.monotonic() - started < 45
    assert done.returncode == 2, done.stderr
    assert b"hooks.PreToolUse[0].hooks[0] timed out after 1s" in done.stderr


def test_a_sandbox_that_cannot_start_never_allows(workspace: Path, trusted_dir: Path) -> None:
    allow = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [command(f"echo '{allow}'")]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace, "--image", "dsh-sandbox/no-such-image:none",
                runner="docker")
    assert (done.returncode, done.stdout) == (2, b""), done.stderr
    assert b"did not run: SANDBOX_UNAVAILABLE" in done.stderr and b"Traceback" not in done.stderr


def test_a_settings_file_in_the_workspace_is_refused(workspace: Path, trusted_dir: Path) -> None:
    marker = trusted_dir / "ran"
    (workspace / ".claude").mkdir()
    inside = settings_file(workspace / ".claude", {"PreToolUse": [{"hooks": [command(f"touch {marker}")]}]})
    done = hook(inside, "PreToolUse", PAYLOAD, workspace, "--mode", "danger-full-access", runner=None)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert b"lies inside the writable root" in done.stderr and b"--settings" in done.stderr
    # Through a link from a trusted place too: the file read is judged, not its name.
    link = trusted_dir / "link.json"
    link.symlink_to(inside)
    done = hook(link, "PreToolUse", PAYLOAD, workspace, "--mode", "danger-full-access", runner=None)
    assert done.returncode == 2 and b"lies inside the writable root" in done.stderr
    assert not marker.exists()


BAD_INPUT = {
    "not json": ({"settings": "{"}, "not JSON"),
    "unknown event in file": ({"settings": '{"hooks": {"PreToolUsed": []}}'}, "hooks.PreToolUsed"),
    "bad timeout": ({"settings": '{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", '
                                 '"timeout": 1e400}]}]}}'}, "hooks.PreToolUse[0].hooks[0].timeout"),
    "unknown --event": ({"event": "PreTool"}, "--event"),
    "payload not json": ({"payload": b"nope"}, "stdin"),
    "payload without tool_name": ({"payload": b'{"hook_event_name": "PreToolUse"}'}, "tool_name"),
    "payload of another event": ({"payload": b'{"hook_event_name": "Stop", "tool_name": "Bash"}'},
                                 "hook_event_name"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_is_exit_2_without_a_traceback(workspace: Path, trusted_dir: Path, case: str) -> None:
    given, named = BAD_INPUT[case]
    marker = trusted_dir / "ran"
    text = given.get("settings", json.dumps({"hooks": {"PreToolUse": [{"hooks": [command(f"touch {marker}")]}]}}))
    settings = trusted_dir / "settings.json"
    settings.write_text(str(text))
    payload = given.get("payload", PAYLOAD)
    done = hook(settings, str(given.get("event", "PreToolUse")), payload, workspace,  # type: ignore[arg-type]
                "--mode", "danger-full-access", runner=None)
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr and named.encode() in done.stderr, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["fifo", "huge", "dev-zero"])
def test_a_settings_file_that_is_no_small_regular_file_is_refused(workspace: Path, trusted_dir: Path,
                                                                   kind: str) -> None:
    path = trusted_dir / "settings.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would hang a careless reader
    elif kind == "huge":
        path.write_text('{"hooks": {}, "pad": "' + "x" * (2 * 1024 * 1024) + '"}')
    else:
        path = Path("/dev/zero")
    done = hook(path, "PreToolUse", PAYLOAD, workspace, "--mode", "danger-full-access", runner=None)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert b"--settings" in done.stderr, done.stderr


def test_the_codex_config_toml_runs_and_cannot_ask(workspace: Path, trusted_dir: Path) -> None:
    ask = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask"}})
    config = trusted_dir / "config.toml"
    config.write_text('model = "o4-mini"\n\n[[hooks.PreToolUse]]\nmatcher = "^Bash$"\n\n'
                      f"[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = '''echo '{ask}' '''\n"
                      "timeout = 30\n")
    done = hook(config, "PreToolUse", PAYLOAD, workspace)
    assert done.returncode == 2 and b"cannot ask" in done.stderr, done.stderr
    done = hook(config, "PreToolUse", PAYLOAD | {"tool_name": "BashOutput"}, workspace)
    assert (done.returncode, done.stdout) == (0, b""), done.stderr


def test_a_guard_the_sandbox_does_not_show_blocks(workspace: Path, trusted_dir: Path) -> None:
    guard = trusted_dir / "guard.sh"  # on the host, but not in the container
    guard.write_text("#!/bin/sh\nexit 0\n")
    guard.chmod(0o755)
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [command(str(guard))]}],
                                           "PostToolUse": [{"hooks": [command(str(guard))]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace, runner="docker")
    assert done.returncode == 2, done.stderr
    assert b"could not be executed in the sandbox (exit status 127" in done.stderr
    done = hook(settings, "PostToolUse", PAYLOAD | {"hook_event_name": "PostToolUse"}, workspace, runner="docker")
    assert done.returncode == 0 and "could not be executed" in json.loads(done.stdout)["systemMessage"]


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_guard_broken_by_a_denial_blocks(workspace: Path, trusted_dir: Path, runner: str) -> None:
    log = trusted_dir / "guard.log"
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [command(f"cat >> {log} || exit 1")]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace, runner=runner)
    assert not log.exists()
    assert done.returncode == 2, done.stderr
    assert b"denied" in done.stderr and str(log).encode() in done.stderr


NOBODY = 65534


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_as_nobody_the_hooks_stay_in_the_sandbox(trusted_dir: Path, runner: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    python = nobody_python()
    if python is None:
        pytest.skip("SANDBOX_UNAVAILABLE: no interpreter nobody can run (set DSH_NOBODY_PYTHON)")
    need_runner(runner)
    home, outside = trusted_dir / "home", trusted_dir / "home" / "planted"
    workspace = home / "ws"
    workspace.mkdir(parents=True)
    for path in (home, workspace):
        os.chown(path, NOBODY, NOBODY)
    settings = settings_file(trusted_dir, {"PreToolUse": [{"matcher": "Bash", "hooks": [
        command('cat > "$CLAUDE_PROJECT_DIR/seen.json"'), command(f"echo x > {outside} || true")]}]})
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    # As a user, Landlock also cannot keep the command from signalling the user's other processes.
    extra = ("landlock-process-escape",) if runner == "landlock" else ()
    accept = [f"--accept-degraded={n}" for n in (*accept_for(runner), *extra)]
    done = subprocess.run([python, "-P", "-m", "dsh.cli", "hook", "--settings", str(settings), "--event", "PreToolUse",
                           "--runner", runner, *accept], input=json.dumps(PAYLOAD).encode(), cwd=workspace,
                          env=env, capture_output=True, timeout=300, check=False, user=NOBODY, group=NOBODY,
                          extra_groups=[])
    assert done.returncode == 0, done.stderr
    assert json.loads((workspace / "seen.json").read_text()) == PAYLOAD
    assert not outside.exists()


ALLOW_JSON = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}})
OFFLINE_GUARDS = {
    "curl": "curl -sS --max-time 3 https://policy.example.com/check || exit 1",
    "python": "python3 -c 'import urllib.request as u; u.urlopen(\"https://policy.example.com/check\", timeout=3)'",
}


@pytest.mark.parametrize("allowed", [True, False], ids=["with-an-allow", "alone"])
@pytest.mark.parametrize("guard", sorted(OFFLINE_GUARDS))
def test_a_guard_the_network_off_broke_blocks(workspace: Path, trusted_dir: Path, guard: str, allowed: bool) -> None:
    # Under network-off the guard's lookup fails: the sandbox, not the guard, ended it.
    first = [command(f"echo '{ALLOW_JSON}'")] if allowed else []
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [*first, command(OFFLINE_GUARDS[guard])]}],
                                           "PostToolUse": [{"hooks": [command(OFFLINE_GUARDS[guard])]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"the sandbox denied it something" in done.stderr and b"network is off" in done.stderr
    # Not a gate: reported, and the session goes on, as Claude Code treats exit 1.
    done = hook(settings, "PostToolUse", PAYLOAD | {"hook_event_name": "PostToolUse"}, workspace)
    assert done.returncode == 0 and "network is off" in json.loads(done.stdout)["systemMessage"]


@pytest.mark.parametrize("allowed", [True, False], ids=["with-an-allow", "alone"])
@pytest.mark.parametrize("signal", ["KILL", "SEGV"])
def test_a_guard_killed_by_a_signal_blocks(workspace: Path, trusted_dir: Path, signal: str, allowed: bool) -> None:
    # bwrap hands back 128+N for a hook killed by signal N (the OOM killer, a crash).
    first = [command(f"echo '{ALLOW_JSON}'")] if allowed else []
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [*first, command(f"kill -{signal} $$")]}],
                                           "PostToolUse": [{"hooks": [command(f"kill -{signal} $$")]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    code = {"KILL": 137, "SEGV": 139}[signal]
    assert f"exit status {code}; blocked because it was killed".encode() in done.stderr, done.stderr
    done = hook(settings, "PostToolUse", PAYLOAD | {"hook_event_name": "PostToolUse"}, workspace)
    assert done.returncode == 0 and f"signal {code - 128}" in json.loads(done.stdout)["systemMessage"]


def test_a_failed_guard_vetoes_an_allow(workspace: Path, trusted_dir: Path) -> None:
    allow, failing = command(f"echo '{ALLOW_JSON}'"), command("echo policy service down >&2; exit 1")
    settings = settings_file(trusted_dir, {"PreToolUse": [{"hooks": [allow, failing]}],
                                           "PermissionRequest": [{"hooks": [failing]}]})
    done = hook(settings, "PreToolUse", PAYLOAD, workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"exit status 1: policy service down; blocked because another hook allowed" in done.stderr
    # Alone it decides nothing: the harness's own approval applies, as Claude Code does.
    done = hook(settings, "PermissionRequest", PAYLOAD | {"hook_event_name": "PermissionRequest"}, workspace)
    assert done.returncode == 0 and "policy service down" in json.loads(done.stdout)["systemMessage"]
    assert "hookSpecificOutput" not in json.loads(done.stdout)


def test_a_settings_file_another_run_wrote_is_refused(tmp_path: Path, workspace: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    marker, other = workspace / "ran", trusted_dir / "other-ws"
    other.mkdir()
    # The planted guard list allows everything (and leaves a mark where a hook may write).
    text = json.dumps({"hooks": {"PreToolUse": [{"hooks": [command(f"touch {marker}; echo '{ALLOW_JSON}'")]}]}})
    # A sandboxed command of another workspace writes its sandbox HOME, by design.
    wrote = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", "bwrap",
                            "--workspace", str(other),
                            *[f"--accept-degraded={n}" for n in accept_for("bwrap")], "--", "sh", "-c",
                            'printf %s "$1" > "$HOME/hooks.json"', "sh", text],
                           cwd=other, capture_output=True, timeout=300, check=False)
    assert wrote.returncode == 0, wrote.stderr
    found = list(Path(os.environ["XDG_CACHE_HOME"], "dsh-sandbox").rglob("hooks.json"))
    assert len(found) == 1, found
    for settings in (found[0], _linked(tmp_path, found[0])):
        done = hook(settings, "PreToolUse", PAYLOAD, workspace)
        assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr
        assert b"--settings" in done.stderr and b"dsh-sandbox that sandboxed commands write" in done.stderr
        assert b"keep the settings file outside" in done.stderr
    assert not marker.exists()


def _linked(directory: Path, target: Path) -> Path:
    """The file through a link from elsewhere: the file read is judged, not its name."""
    link = directory / "link.json"
    link.symlink_to(target)
    return link


def test_a_fifo_settings_file_gets_a_settings_hint(workspace: Path, trusted_dir: Path) -> None:
    fifo = trusted_dir / "settings.json"
    os.mkfifo(fifo)
    done = hook(fifo, "PreToolUse", PAYLOAD, workspace, "--mode", "danger-full-access", runner=None)
    assert done.returncode == 2 and b"Traceback" not in done.stderr
    assert b"name the settings file itself" in done.stderr and b".toml" not in done.stderr, done.stderr
