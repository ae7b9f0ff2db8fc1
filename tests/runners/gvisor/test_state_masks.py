"""dsh-sandbox's own state directories are masked whole on gVisor too.

A warm gVisor sandbox lives as long as its session: its mounts are fixed when
it starts.  A HOME of a workspace, or a private /tmp of a session, made in a
state directory after that start must stay out of reach of the session's
later commands (and of a long-running one), even when the directory held
nothing else to hide at the start.  What the run keeps (its own HOME) stays
readable and writable.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from dsh.runners.gvisor import GvisorRunner
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import gather_facts, plan_mounts

from tests.runners.gvisor.helpers import finish, policy, sh, start


@pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY])
def test_an_entry_made_after_the_start_in_a_state_directory_is_hidden(
    runner: GvisorRunner, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: SandboxMode
) -> None:
    state = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(state))
    homes = state / "dsh-sandbox" / "home"
    own = homes / "own-ws"
    own.mkdir(parents=True)
    (own / "mine.txt").write_text("MINE\n")
    roots = (ws, own) if mode is SandboxMode.WORKSPACE_WRITE else ()
    pol = dataclasses.replace(policy(ws, mode, roots=roots), home=own)
    plan = plan_mounts(pol, gather_facts(pol, 0))
    assert ("mask-dir", str(homes)) in [(e.kind, e.path) for e in plan.entries]
    go = ws / "go" if mode is SandboxMode.WORKSPACE_WRITE else tmp_path / "go"
    script = (f"while [ ! -e {go} ]; do sleep 0.05; done; cat {homes}/late-ws/.git-credentials 2>/dev/null; "
              f"cd {homes} && echo *; cat {own}/mine.txt")
    if mode is SandboxMode.WORKSPACE_WRITE:
        script += f"; echo mine > {own}/f && echo own-written"
    proc = start(runner, ["/bin/sh", "-c", script], pol)
    (homes / "late-ws").mkdir()
    (homes / "late-ws" / ".git-credentials").write_text("SECRET-late\n")
    go.touch()
    ran = finish(proc)
    assert ran.status.exit_code == 0, ran.text
    assert "SECRET" not in ran.text and "late-ws" not in ran.text, ran.text
    assert "MINE" in ran.text
    if mode is SandboxMode.WORKSPACE_WRITE:
        assert "own-written" in ran.text and (own / "f").read_text() == "mine\n"
    later = sh(runner, f"cd {homes} && echo *; cat {homes}/late-ws/.git-credentials 2>/dev/null", pol)
    assert "SECRET" not in later.text and "late-ws" not in later.text, later.text


def test_a_spill_directory_empty_at_the_start_stays_hidden_when_a_session_fills_it(
    runner: GvisorRunner, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    spills = runtime / "dsh-sandbox"
    spills.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    pol = policy(ws)
    assert ("mask-dir", str(spills)) in [(e.kind, e.path) for e in plan_mounts(pol, gather_facts(pol, 0)).entries]
    go = ws / "go"
    proc = start(runner, ["/bin/sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; "
                                           f"cat {spills}/*/* 2>/dev/null; echo done"], pol)
    (spills / "session-late").mkdir(mode=0o700)
    (spills / "session-late" / "stdout.log").write_text("SECRET-output\n")
    go.touch()
    ran = finish(proc)
    assert ran.status.exit_code == 0, ran.text
    assert "SECRET" not in ran.text and "done" in ran.text, ran.text
    later = sh(runner, f"cat {spills}/*/* 2>/dev/null; echo done", pol)
    assert "SECRET" not in later.text, later.text
