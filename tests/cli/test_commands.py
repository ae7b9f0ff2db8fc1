"""``--version``, ``--help`` everywhere, ``profile ...`` and ``runners``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli, trusted_config_dir
from tests.support.sandboxed import need_runner

COMMANDS = [
    [],
    ["run"],
    ["profile"],
    ["profile", "list"],
    ["profile", "show"],
    ["profile", "validate"],
    ["profile", "explain"],
    ["runners"],
]


def test_version() -> None:
    done = cli("--version")
    assert done.returncode == 0
    assert done.stdout.startswith(b"dsh-sandbox, version ")


def test_version_alone_loads_no_command_line_library() -> None:
    """``--version`` alone is answered before click is imported; with
    anything else it goes through click, and both say the same."""
    probe = ("import sys\nfrom dsh.cli import main\ntry:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n"
             "    code = e.code\nprint('exit', code, 'click' in sys.modules)\n")
    alone = subprocess.run([sys.executable, "-P", "-c", probe, "--version"], capture_output=True, text=True,
                           check=False, timeout=60)
    assert alone.stdout == "dsh-sandbox, version 0.1.0\nexit 0 False\n", alone
    # With another option first (``-h`` is eager too: the version must come first to win).
    grouped = subprocess.run([sys.executable, "-P", "-c", probe, "--version", "-h"], capture_output=True,
                             text=True, check=False, timeout=60)
    assert grouped.stdout == "dsh-sandbox, version 0.1.0\nexit 0 True\n", grouped


def test_top_level_help_loads_no_runner() -> None:
    """When click renders the help (here: a narrow terminal), it lists a
    runner's own command (``image``) by importing only that command's module
    and its default image's name, not the runner or its client behind it."""
    probe = ("import sys\nfrom dsh.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith('dsh.runners.') and m.count('.') == 3))\n")
    done = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=False,
                          timeout=60, env={**os.environ, "COLUMNS": "60"})
    assert "  image " in done.stdout, done
    assert done.stdout.rstrip().endswith("['dsh.runners.docker.cli', 'dsh.runners.docker.image_name']"), done


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_on_every_command(command: list[str]) -> None:
    done = cli(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"Usage: ")
    assert b"Traceback" not in done.stderr


def test_profile_list() -> None:
    done = cli("profile", "list", "--json")
    assert done.returncode == 0
    names = {p["name"] for p in json.loads(done.stdout)}
    assert {"read-only", "workspace-write", "danger-full-access", "python", "node"} <= names
    text = cli("profile", "list").stdout.decode()
    assert "workspace-write" in text and "python" in text


def test_profile_show_merges_extends() -> None:
    data = json.loads(cli("profile", "show", "python", "--json").stdout)
    assert data["name"] == "python" and data["mode"] == "workspace-write"
    assert data["chain"][:2] == ["python", "workspace-write"]
    done = cli("profile", "show", "no-such-profile")
    assert done.returncode == 2 and b"no-such-profile" in done.stderr


def test_profile_validate(tmp_path: Path) -> None:
    good = trusted_config_dir() / "good.toml"
    good.write_text('extends = "read-only"\nhidden_paths = [".env"]\n')
    done = cli("profile", "validate", str(good))
    assert done.returncode == 0 and done.stdout.startswith(b"ok: ")
    bad = trusted_config_dir() / "bad.toml"
    bad.write_text('mode = "workspace-write"\nnetwrok = true\n')
    done = cli("profile", "validate", str(bad))
    assert done.returncode == 2
    assert b"line 2" in done.stderr and b"network" in done.stderr  # the line and the fix
    assert b"Traceback" not in done.stderr


def test_profile_explain_bwrap(workspace: Path) -> None:
    need_runner("bwrap")
    done = cli("profile", "explain", "python", "--runner", "bwrap", "--workspace", str(workspace))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "mode: workspace-write (profile python)" in out
    assert "runner: bwrap" in out and "enforcement: full" in out
    assert "network: " in out and "limits: " in out and "cannot enforce:" in out
    assert str(workspace) in out


def test_profile_explain_refusal_and_danger(workspace: Path) -> None:
    need_runner("landlock")
    done = cli("profile", "explain", "workspace-write", "--runner", "landlock",
               "--workspace", str(workspace))
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "REFUSED" in out and "accept_degraded" in out
    assert "cannot enforce:" in out and ".git" in out  # what it cannot, with the reason
    danger = cli("profile", "explain", "danger-full-access", "--workspace", str(workspace))
    assert danger.returncode == 0 and b"unwrapped" in danger.stdout
    unknown = cli("profile", "explain", "python", "--runner", "chroot")
    assert unknown.returncode == 2 and b"chroot" in unknown.stderr


def test_runners_json(workspace: Path) -> None:
    need_runner("landlock")
    need_runner("bwrap")
    done = cli("runners", "--json", cwd=workspace)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert {"landlock", "bwrap", "seatbelt", "docker", "gvisor", "e2b"} <= set(rows)
    for row in rows.values():
        assert set(row["enforcement"]) == {"read-only", "workspace-write", "danger-full-access"}
        assert row["available"] or row["reason"]
        assert row["enforcement"]["danger-full-access"] == "unwrapped"
    assert rows["bwrap"]["enforcement"]["workspace-write"] == "full"
    assert rows["landlock"]["enforcement"]["workspace-write"].startswith("refused")
    assert rows["landlock"]["version"]  # the ABI
    assert not rows["seatbelt"]["available"]
    assert rows["seatbelt"]["enforcement"]["read-only"] == "-"


def test_runners_table(workspace: Path) -> None:
    done = cli("runners", cwd=workspace)
    assert done.returncode == 0
    lines = done.stdout.decode().splitlines()
    assert lines[0].split() == [
        "RUNNER", "STATUS", "VERSION", "read-only", "workspace-write", "danger-full-access"
    ]
    assert any(line.startswith("seatbelt") and "unavailable" in line for line in lines)


def test_runners_all_needs_prune() -> None:
    done = cli("runners", "--all")
    assert done.returncode == 2 and b"--prune" in done.stderr


def test_runners_prune_leftovers() -> None:
    need_runner("docker")
    # Without --all only containers whose owning process is dead are removed, so
    # other sessions running now are untouched.
    done = cli("runners", "--prune", "--json")
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout)["removed"], list)
