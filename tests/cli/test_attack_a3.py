"""What an attack on approvals, notes and the CLI found, through the real CLI
and the real runners (bwrap and landlock), as the caller and as nobody."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.test_run_approval_changes import Box, box  # noqa: F401  (the fixture)
from tests.runners.test_trusted_files import LANDLOCK_ACCEPT, NOBODY, cli
from tests.support.require import require_runner
from tests.support.sandboxed import LANDLOCK_DEGRADED
from tests.support.wait import readable


def tool_argv(b: Box, *args: str) -> list[str]:
    profile = b.cfg / "profile.toml"
    profile.write_text('extends = "workspace-write"\nexclude_tmp = true\n'
                       + (LANDLOCK_ACCEPT if b.runner == "landlock" else ""))
    return [*cli(b.user), "tool", "call", "--runner", b.runner, "--profile", str(profile), *args]


def run_as(b: Box, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    if b.user == "nobody":
        kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
    proc = subprocess.Popen(argv, cwd=b.ws, env=b.env(), stdout=subprocess.PIPE,  # type: ignore[call-overload]
                            stderr=subprocess.PIPE, **kwargs)
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(argv, proc.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))


def own(b: Box, *paths: Path) -> None:
    if b.user == "nobody":
        for path in paths:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)


def notes(stderr: str) -> str:
    """Our own lines (the command's output goes to a pipe as it is)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if "dsh-sandbox: " in line)


def on_terminal(b: Box, argv: list[str], steps: list[tuple[bytes, Callable[[int], None]]]) -> tuple[str, int]:
    """Run ``argv`` on a new pty (its controlling terminal); each step's action
    runs once its text has appeared, in order.  Returns (what it printed, status)."""
    master, slave = os.openpty()

    def take_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    kwargs: dict[str, object] = {}
    if b.user == "nobody":
        os.chown(os.ttyname(slave), NOBODY, NOBODY)
        kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
    seen = b""
    try:
        proc = subprocess.Popen(argv, cwd=b.ws, env=b.env(), stdin=slave, stdout=slave, stderr=slave,  # type: ignore[call-overload]
                                start_new_session=True, preexec_fn=take_terminal, **kwargs)
        os.close(slave)
        deadline = time.monotonic() + 180
        pending = list(steps)
        while time.monotonic() < deadline:
            ready = readable(master, 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed its terminal
                break
            if not chunk:
                break
            seen += chunk
            while pending and pending[0][0] in seen:
                pending.pop(0)[1](master)
        else:
            raise AssertionError(f"the run did not finish; it printed: {seen!r}")
        code = proc.wait(timeout=60)
    finally:
        os.close(master)
    return seen.decode(errors="replace"), code


# -- E1: a "y" typed for the command's own question does not approve ----------------------------------
def test_typeahead_meant_for_the_command_does_not_approve(box: Box) -> None:  # noqa: F811
    go = box.ws / "go"
    script = box.ws / "ask.sh"
    script.write_text("printf 'Proceed? [y/N] '\n"
                      "while [ ! -e go ]; do sleep 0.05; done\n"  # the test has typed by now
                      f"touch {box.out}/denied\n")
    own(box, script)
    steps = [(b"Proceed? [y/N]", lambda fd: (os.write(fd, b"y\n"), go.touch())),
             (b"[N]o (default", lambda fd: os.write(fd, b"n\n"))]
    shown, code = on_terminal(box, box.argv("--approval", "prompt", "--", "sh", "ask.sh"), steps)
    assert "denied at the terminal" in shown, shown
    assert code != 0 and not (box.out / "denied").exists()
    [record] = box.log()
    assert record["decision"] == "deny" and record["provider"] == "approval-prompt"


# -- E2: notes never carry the command's escape sequences -------------------------------------------------
def test_the_denial_note_shows_a_hostile_path_escaped(box: Box) -> None:  # noqa: F811
    command = (f"printf 'touch: cannot touch %b: Permission denied\\n' \"'{box.out}/a\\033]52;c;Zm9v\\007b'\" >&2;"
               " exit 1")
    done = box.run("-c", command)
    assert done.returncode == 1
    ours = notes(done.stderr)
    assert "\x1b" not in ours and "\x07" not in ours, repr(done.stderr)
    assert f"write to {box.out}/a\\x1b]52;c;Zm9v\\x07b denied" in ours, done.stderr


def test_the_trusted_files_warning_shows_a_hostile_directory_escaped(box: Box) -> None:  # noqa: F811
    command = "d=$(printf 'x\\033[2K\\033[8m'); mkdir \"$d\" && git init -q \"$d\""
    done = box.run("-c", command)
    ours = notes(done.stderr)
    assert "\x1b" not in ours, repr(done.stderr)
    assert "x\\x1b[2K\\x1b[8m/.git" in ours, done.stderr


def test_tool_call_output_on_a_terminal_is_shown_not_obeyed(box: Box) -> None:  # noqa: F811
    args = json.dumps({"command": "printf 'A\\033]52;c;Zm9v\\007\\033]0;title\\007\\033[2JB\\n'",
                       "description": "print"})
    shown, code = on_terminal(box, tool_argv(box, "bash", args), [])
    assert code == 0, shown
    assert "\x1b]52" not in shown and "\x1b[2J" not in shown and "\x07" not in shown, repr(shown)
    assert "A\\x1b]52;c;Zm9v\\x07\\x1b]0;title\\x07\\x1b[2JB" in shown
    raw, _ = on_terminal(box, tool_argv(box, "--raw-output", "bash", args), [])
    assert "\x1b]52;c;Zm9v\x07" in raw  # asked for: as it is


# -- E3: a denied run is remembered by its words, from one tool call to the next ----------------------------
def test_a_respaced_rerun_in_a_second_tool_call_is_not_approved_by_rules(box: Box) -> None:  # noqa: F811
    (box.ws / "step.sh").write_text("")
    (box.ws / "build.sh").write_text(f". ./step.sh\necho 'touch {box.out}/pwned' > step.sh\ntouch {box.out}/denied\n")
    own(box, box.ws / "step.sh", box.ws / "build.sh")
    rules = box.rules('argv = ["bash", "build.sh"]\n')
    first = run_as(box, tool_argv(box, "--approval", rules, "bash",
                                  json.dumps({"command": "bash build.sh", "description": "build"})))
    assert "denied" in first.stdout and not (box.out / "denied").exists(), first
    second = run_as(box, tool_argv(box, "--approval", rules, "bash", json.dumps({
        "command": "bash  build.sh", "description": "build", "sandbox_permissions": "danger-full-access",
        "justification": "it needs to write outside"})))
    assert not (box.out / "pwned").exists(), second
    assert second.returncode == 1 and "modified" in second.stdout and "step.sh" in second.stdout, second
    decisions = [r["decision"] for r in box.log()]
    assert decisions[-1] == "deny", decisions


# -- E4: a directory shut with chmod 000 does not hide what the denied run changed in it --------------------
def test_a_mode_000_directory_makes_the_changes_not_known(box: Box) -> None:  # noqa: F811
    h = box.ws / "h"
    h.mkdir()
    (h / "build.sh").write_text("true\n")
    (box.ws / "go.sh").write_text(f"chmod 700 h\necho 'touch {box.out}/pwned' >> h/build.sh\nchmod 000 h\n"
                                  f"touch {box.out}/denied\n")
    own(box, h, h / "build.sh", box.ws / "go.sh")
    # The scan for protected names cannot search h either: accepted, to reach the approval.
    landlock = [*LANDLOCK_DEGRADED, "landlock-process-escape"]
    accepted = ["protected-scan-incomplete", *(landlock if box.runner == "landlock" else [])]
    profile = box.cfg / "shut.toml"
    profile.write_text(f'extends = "workspace-write"\nexclude_tmp = true\naccept_degraded = {json.dumps(accepted)}\n')
    h.chmod(0o000)
    try:
        done = run_as(box, [*cli(box.user), "run", "--runner", box.runner, "--profile", str(profile),
                            "--approval", box.rules('argv = ["sh", "go.sh"]\n'), "--", "sh", "go.sh"])
    finally:
        h.chmod(0o700)
    assert "pwned" in (h / "build.sh").read_text(), done  # the denied run did change it
    [record] = box.log()
    assert record["decision"] == "deny", (record, done.stderr)
    changes = record["changes"]
    assert changes["total"] or changes["incomplete"], changes  # type: ignore[index]
    assert not (box.out / "denied").exists()


# -- E6: a rules file hard-linked into the workspace ----------------------------------------------------------
def test_a_rules_file_hard_linked_into_the_workspace_is_refused(box: Box) -> None:  # noqa: F811
    rules = box.rules('command = "true"\n')
    os.link(rules[len("rules:"):], box.ws / "rules-link.toml")
    done = box.run("--approval", rules, "--", "true")
    assert done.returncode == 2, done
    assert "has 2 hard links" in done.stderr and "Traceback" not in done.stderr, done.stderr


# -- E7: DSH_HOME inside a writable root ----------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_dsh_home_inside_a_writable_root_is_refused(runner: str, trusted_dir: Path, tmp_path: Path) -> None:
    """In the workspace (a root of this run) and in the shared /tmp (a root of
    any run whose profile shares it): a command there could swap the log for a
    link to a file it wants the caller to append to."""
    require_runner(runner)
    ws = trusted_dir / "ws"
    ws.mkdir()
    rules = trusted_dir / "rules.toml"
    rules.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{ws}"\ncommand = "true"\n')
    for home in (ws / ".state", tmp_path / "dsh-home"):
        _refused_everywhere(runner, ws, rules, home)


def _refused_everywhere(runner: str, ws: Path, rules: Path, home: Path) -> None:
    env = {**os.environ, "DSH_HOME": str(home)}
    degraded = [w for name in LANDLOCK_DEGRADED for w in ("--accept-degraded", name)] if runner == "landlock" else []
    for args in (["run", "--runner", runner, "--workspace", str(ws), *degraded, "--approval", f"rules:{rules}",
                  "--", "true"],
                 ["tool", "call", "--runner", runner, "--workspace", str(ws), *degraded, "bash",
                  '{"command": "true", "description": "t"}']):
        done = subprocess.run([sys.executable, "-P", "-m", "dsh.cli", *args], capture_output=True, text=True,
                              env=env, timeout=120, check=False)
        assert done.returncode == 2, done
        # In the workspace, the policy refuses it first (dsh-sandbox's own state as a writable root).
        assert "DSH_HOME" in done.stderr and str(home) in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and not (home / "escalations.jsonl").exists()


# -- BAD-2: the spill path tool call prints can be read ---------------------------------------------------------
def test_tool_call_keeps_the_spill_file_it_names(box: Box) -> None:  # noqa: F811
    done = run_as(box, tool_argv(box, "bash", json.dumps({"command": "seq 1 200000", "description": "many"})))
    assert done.returncode == 0, done
    marker = "full output: "
    assert marker in done.stdout, done.stdout[-500:]
    path = Path(done.stdout.split(marker, 1)[1].split("]", 1)[0])
    try:
        assert path.read_text().splitlines()[-1] == "200000"
    finally:
        import shutil

        shutil.rmtree(path.parent, ignore_errors=True)


# -- BAD-3: our own stdout failing or closed ---------------------------------------------------------------------
@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_full_or_closed_stdout_is_a_one_line_error(runner: str, workspace: Path) -> None:
    require_runner(runner)
    base = [sys.executable, "-P", "-m", "dsh.cli", "run", "--runner", runner, "--workspace", str(workspace)]
    if runner == "landlock":
        base += [word for name in LANDLOCK_DEGRADED for word in ("--accept-degraded", name)]
    with open("/dev/full", "w") as full:
        for extra in ([], ["--json"]):
            done = subprocess.run([*base, *extra, "--", "echo", "hi"], stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=120, check=False)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert "OUTPUT_FAILED: cannot write the command's output to stdout (No space left" in done.stderr
    closed = subprocess.run(["sh", "-c", '"$@" >&-', "sh", *base, "--", "echo", "hi"], stderr=subprocess.PIPE,
                            text=True, timeout=120, check=False)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr, closed.stderr
    assert "stdout is closed (>&-)" in closed.stderr
