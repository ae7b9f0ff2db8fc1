"""``dsh-sandbox tool spec`` and ``dsh-sandbox tool call``, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import dsh_home_for, trusted_config_dir
from tests.support.sandboxed import LANDLOCK_DEGRADED, need_runner


def cli(*args: str, cwd: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if home is not None:
        env["DSH_HOME"] = str(dsh_home_for(home))
    return subprocess.run(
        [sys.executable, "-P", "-m", "dsh.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=env, check=False,
    )


@pytest.fixture
def local_composition(tmp_path: Path, workspace: Path) -> Path:
    path = tmp_path / "local.yaml"
    path.write_text(
        f"- id: shell\n  name: bash-local\n  config:\n    cwd: {workspace}\n- id: jobs\n  name: jobs\n"
    )
    return path


@pytest.fixture
def call_composition(tmp_path: Path, workspace: Path) -> Path:
    """A one-shot call's composition: no job registry (no job outlives the call)."""
    path = tmp_path / "call.yaml"
    path.write_text(f"- id: shell\n  name: bash-local\n  config:\n    cwd: {workspace}\n")
    return path


def test_spec_both_formats(local_composition: Path) -> None:
    openai = json.loads(cli("tool", "spec", "--composition", str(local_composition)).stdout)
    assert [t["function"]["name"] for t in openai] == ["bash", "job_output", "job_kill"]
    anthropic = cli("tool", "spec", "--format", "anthropic", "--composition", str(local_composition))
    specs = json.loads(anthropic.stdout)
    assert [t["name"] for t in specs] == ["bash", "job_output", "job_kill"]
    assert "sandbox_permissions" not in specs[0]["input_schema"]["properties"]


def test_spec_of_the_sandboxed_default(workspace: Path) -> None:
    done = cli("tool", "spec", "--format", "anthropic", "--mode", "read-only",
               "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    bash = json.loads(done.stdout)[0]
    assert {"sandbox_permissions", "justification"} <= set(bash["input_schema"]["properties"])
    assert "read-only mode" in bash["description"]
    # What `tool call` refuses is not offered: no job outlives a one-shot call.
    assert [t["name"] for t in json.loads(done.stdout)] == ["bash"]
    assert "run_in_background" not in bash["input_schema"]["properties"]
    assert "job" not in bash["description"]


def test_one_shot_call_never_announces_a_job(workspace: Path, local_composition: Path) -> None:
    """Each call is its own session: a job would be killed when it returns."""
    args = json.dumps({"command": "touch ran", "description": "x", "run_in_background": True})
    background = cli("tool", "call", "bash", args, "--mode", "danger-full-access", cwd=workspace)
    assert background.returncode == 2, background.stdout + background.stderr
    assert "run_in_background: a one-shot tool call" in background.stderr
    assert "long-lived" in background.stderr and "Traceback" not in background.stderr
    for name in ("job_output", "job_kill"):
        done = cli("tool", "call", name, '{"job_id": "job-1"}', cwd=workspace)
        assert done.returncode == 2 and f"{name}: no job outlives" in done.stderr, done.stderr
    jobs = cli("tool", "call", "bash", '{"command": "touch ran", "description": "x"}',
               "--composition", str(local_composition), cwd=workspace)
    assert jobs.returncode == 2 and "mounts a job registry (jobs)" in jobs.stderr, jobs.stderr
    assert not (workspace / "ran").exists()
    # A command outliving timeout_ms is killed and says so; no job id is handed out.
    slow = json.dumps({"command": "sleep 30", "description": "x", "timeout_ms": 300})
    done = cli("tool", "call", "bash", slow, "--mode", "danger-full-access", "--json", cwd=workspace)
    result = json.loads(done.stdout)
    assert result["job_id"] is None and "[timed out after 300ms]" in result["content"], result
    assert "job" not in result["content"]


def test_call_prints_what_the_model_sees(call_composition: Path, workspace: Path) -> None:
    done = cli("tool", "call", "bash", '{"command": "echo hi; exit 3", "description": "x"}',
               "--composition", str(call_composition))
    assert done.returncode == 0 and done.stdout == "hi\n[exit code: 3]\n"
    as_json = cli("tool", "call", "bash", '{"command": "echo hi", "description": "x"}',
                  "--composition", str(call_composition), "--json")
    assert json.loads(as_json.stdout) == {"content": "hi", "is_error": False, "job_id": None}


def test_call_bad_input(call_composition: Path, workspace: Path) -> None:
    bad_json = cli("tool", "call", "bash", "{command", "--composition", str(call_composition))
    assert bad_json.returncode == 2 and "not valid JSON" in bad_json.stderr
    assert "Traceback" not in bad_json.stderr
    bad_args = cli("tool", "call", "bash", '{"command": "touch ran", "timeout_ms": -1}',
                   "--composition", str(call_composition))
    assert bad_args.returncode == 1 and "timeout_ms: must be between" in bad_args.stdout
    assert not (workspace / "ran").exists()
    clash = cli("tool", "call", "bash", "{}", "--composition", str(call_composition),
                "--mode", "read-only")
    assert clash.returncode == 2 and "conflicts" in clash.stderr
    approval = cli("tool", "call", "bash", "{}", "--approval", "maybe")
    assert approval.returncode == 2 and "--approval 'maybe'" in approval.stderr


def test_call_through_bwrap_with_approval_flag(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    rules = trusted_config_dir() / f"rules-{tmp_path.name}.toml"
    rules.write_text(
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{workspace}"\ncommand = "echo a > a.txt"\n'
    )
    common = ["--runner", "bwrap", "--mode", "read-only", "--workspace", str(workspace)]
    plain = cli("tool", "call", "bash", '{"command": "echo a > a.txt", "description": "x"}',
                *common, home=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.endswith("[sandbox: file access denied under read-only mode]\n")
    args = json.dumps({"command": "echo a > a.txt", "description": "x",
                       "sandbox_permissions": "workspace-write", "justification": "write a.txt"})
    denied = cli("tool", "call", "bash", args, *common, home=tmp_path)
    assert denied.returncode == 1 and "denied by approval-deny" in denied.stdout
    assert not (workspace / "a.txt").exists()
    approved = cli("tool", "call", "bash", args, *common, "--approval", f"rules:{rules}",
                   home=tmp_path)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "[sandbox: ran under workspace-write mode after approval (once)]" in approved.stdout
    assert (workspace / "a.txt").read_text() == "a\n"
    log = [json.loads(x) for x in (dsh_home_for(tmp_path) / "escalations.jsonl").read_text().splitlines()]
    assert [r["decision"] for r in log] == ["deny", "approve_once"]


def test_landlock_partial_enforcement_fails_closed_as_a_result(
    workspace: Path, tmp_path: Path
) -> None:
    """Landlock cannot keep protected paths read-only in workspace-write: without
    the profile accepting that, the escalated run is refused, not run."""
    need_runner("landlock")
    rules = trusted_config_dir() / f"rules-{tmp_path.name}.toml"
    rules.write_text(
        f'[[rule]]\nmode = "workspace-write"\nworkdir = "{workspace}"\ncommand = "echo a > a.txt"\n'
    )
    args = json.dumps({"command": "echo a > a.txt", "description": "x",
                       "sandbox_permissions": "workspace-write", "justification": "write a.txt"})
    done = cli("tool", "call", "bash", args, "--runner", "landlock", "--mode", "read-only",
               "--workspace", str(workspace), "--approval", f"rules:{rules}", home=tmp_path)
    assert done.returncode == 1 and "SANDBOX_UNAVAILABLE" in done.stdout
    assert "The command was not run." in done.stdout
    assert not (workspace / "a.txt").exists()
    # With a composition whose policy accepts the degradation, it runs.
    composition = trusted_config_dir() / f"c-{tmp_path.name}.yaml"
    entries = [
        {"name": "sandbox-policy", "config": {"mode": "read-only", "workspace": str(workspace),
                                              "accept_degraded": list(LANDLOCK_DEGRADED)}},
        {"name": "sandbox", "config": {"runner": "landlock"}},
        {"name": "bash-sandbox", "config": {"cwd": str(workspace)}},
        {"name": "approval-rules", "config": {"path": str(rules)}},
    ]
    composition.write_text(json.dumps(entries))  # JSON is YAML
    done = cli("tool", "call", "bash", args, "--composition", str(composition), home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (workspace / "a.txt").read_text() == "a\n"


def test_call_with_a_profile(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    args = json.dumps({"command": "echo a > a.txt", "description": "x"})
    done = cli("tool", "call", "bash", args, "--profile", "read-only", "--runner", "bwrap",
               "--workspace", str(workspace), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("[sandbox: file access denied under read-only mode]\n")
    assert not (workspace / "a.txt").exists()
    missing = cli("tool", "call", "bash", args, "--profile", "no-such-profile", "--workspace", str(workspace))
    assert missing.returncode == 2 and "no-such-profile" in missing.stderr, missing.stderr


def test_call_uses_the_config_files(workspace: Path, tmp_path: Path) -> None:
    need_runner("bwrap")
    (workspace / ".dsh").mkdir()
    # The project may tighten the mode; the runner is the caller's choice.
    (workspace / ".dsh" / "config.toml").write_text('mode = "read-only"\n')
    args = json.dumps({"command": "echo a > a.txt", "description": "x"})
    done = cli("tool", "call", "bash", args, "--runner", "bwrap", cwd=workspace, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("[sandbox: file access denied under read-only mode]\n")
    assert not (workspace / "a.txt").exists()
    image = cli("tool", "call", "bash", args, "--image", "dev:1", "--runner", "bwrap", cwd=workspace)
    assert image.returncode == 2 and "--image: sets the docker runner's image" in image.stderr, image.stderr
    (workspace / ".dsh" / "config.toml").write_text('mode = "danger-full-access"\n')
    weak = cli("tool", "call", "bash", args, cwd=workspace)
    assert weak.returncode == 2 and "would weaken the sandbox" in weak.stderr, weak.stderr
    assert not (workspace / "a.txt").exists()


def test_call_env_flag_reaches_the_command(workspace: Path) -> None:
    args = json.dumps({"command": 'echo "$GREETING"', "description": "x"})
    done = cli("tool", "call", "bash", args, "--mode", "danger-full-access", "--env", "GREETING=hello",
               cwd=workspace)
    assert done.returncode == 0 and done.stdout == "hello\n", done.stdout + done.stderr
