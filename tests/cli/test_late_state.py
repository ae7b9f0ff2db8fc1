"""State another session makes while a run is going on stays out of that run's
reach, even when its directory did not exist when the run started.

A runner can mask only a directory that exists when the command starts.  A
read-only run makes no private /tmp and spills nothing, so on a fresh login
(an empty ``$XDG_RUNTIME_DIR``) the first long job, shell or MCP server used to
see every later session's private /tmp and spill files.  The host now makes
each missing state directory before the command starts.
"""

from __future__ import annotations

import secrets
import subprocess

import pytest

from tests.cli.test_own_state import Caller, caller
from tests.runners.test_trusted_files import NOBODY, cli, docker_group
from tests.support.require import require_runner
from tests.support.wait import PATIENCE_S, wait_until

__all__ = ["caller"]


def _start(who: Caller, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    kwargs: dict[str, object] = {}
    if who.user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [*cli(who.user), *args], cwd=who.ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        encoding="utf-8", errors="replace", **kwargs)


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_private_tmp_made_during_a_run_in_a_missing_state_directory_stays_hidden(
    caller: Caller, runner: str
) -> None:
    require_runner(runner)
    runtime = caller.base / "run"  # a fresh login's runtime directory: no dsh-sandbox/ in it yet
    runtime.mkdir(mode=0o700)
    go = caller.base / "go"
    caller.own(runtime)
    env = caller.env(XDG_RUNTIME_DIR=str(runtime))
    flags = ("--profile", caller.profile()) if runner == "landlock" else ()
    secret = f"dsh-late-tmp-{secrets.token_hex(8)}"
    reader = _start(caller, env, "run", "--runner", runner, *flags, "--mode", "read-only", "-c",
                    f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done; "
                    f"cat {runtime}/dsh-sandbox/tmp/*/late 2>&1; echo reader-done")
    writer = None
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline() == "ready\n"  # its sandbox is up, and waits on go
        writer = _start(caller, env, "run", "--runner", runner, *flags, "-c",
                        f"echo {secret} > \"${{TMPDIR:-/tmp}}/late\"; sleep {PATIENCE_S}")
        wait_until(lambda: any((runtime / "dsh-sandbox" / "tmp").glob("*/late")))
        go.touch()
        rest, err = reader.communicate(timeout=PATIENCE_S)
        out = "ready\n" + rest
    finally:
        go.touch()
        for proc in (reader, writer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert "reader-done" in out, out + err
    assert secret not in out + err, out + err


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_a_private_tmp_where_another_environment_puts_it_stays_hidden(caller: Caller, runner: str) -> None:
    """A session started with another environment (here: without
    ``XDG_CACHE_HOME``, as a cron job or an agent harness may be) keeps its
    private /tmp where that environment says; a run with ``XDG_CACHE_HOME`` set
    hides it all the same."""
    require_runner(runner)
    cache = caller.base / "cache"
    cache.mkdir(mode=0o700)
    caller.own(cache)
    flags = ("--profile", caller.profile()) if runner == "landlock" else ()
    secret = f"dsh-other-env-{secrets.token_hex(8)}"
    default_tmp = caller.home / ".cache" / "dsh-sandbox" / "tmp"
    writer = _start(caller, caller.env(), "run", "--runner", runner, *flags, "-c",
                    f"echo {secret} > \"${{TMPDIR:-/tmp}}/late\"; sleep {PATIENCE_S}")
    try:
        wait_until(lambda: any(default_tmp.glob("*/late")))
        reader = caller.run("run", "--runner", runner, *flags, "--mode", "read-only", "-c",
                            f"cat {default_tmp}/*/late 2>&1; echo reader-done",
                            env=caller.env(XDG_CACHE_HOME=str(cache)))
    finally:
        writer.kill()
        writer.communicate()
    assert "reader-done" in reader.stdout, reader.stdout + reader.stderr
    assert secret not in reader.stdout + reader.stderr, reader.stdout + reader.stderr


@pytest.mark.parametrize("runner", ["bwrap", "landlock"])
def test_another_workspaces_home_made_during_a_run_stays_hidden(caller: Caller, runner: str) -> None:
    """On a fresh cache the HOMEs directory holds only the run's own HOME, so
    nothing in it is hidden at the start; a HOME another workspace's session
    makes there during the run must not become readable (landlock granted the
    directory whole)."""
    require_runner(runner)
    other = caller.base / "ws2"
    other.mkdir()
    caller.own(other)
    go = caller.base / "go"
    flags = ("--profile", caller.profile()) if runner == "landlock" else ()
    secret = f"dsh-late-home-{secrets.token_hex(8)}"
    env = caller.env()
    reader = _start(caller, env, "run", "--runner", runner, *flags, "-c",
                    f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done; "
                    f"cat \"$HOME\"/../*/late 2>&1; echo reader-done")
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline() == "ready\n"
        kwargs: dict[str, object] = {}
        if caller.user == "nobody":
            kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
        done = subprocess.run([*cli(caller.user), "run", "--runner", runner, *flags, "-c",  # type: ignore[call-overload]
                               f"echo {secret} > \"$HOME/late\""], cwd=other, env=env, capture_output=True,
                              encoding="utf-8", errors="replace", timeout=PATIENCE_S, check=False, **kwargs)
        assert done.returncode == 0, done.stdout + done.stderr
        go.touch()
        rest, err = reader.communicate(timeout=PATIENCE_S)
    finally:
        go.touch()
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert "reader-done" in rest, rest + err
    assert secret not in rest + err, rest + err


@pytest.mark.parametrize("runner", ["bwrap", "landlock", "gvisor"])
def test_a_home_kept_by_a_session_with_another_home_stays_hidden(caller: Caller, runner: str) -> None:
    """A session started with another HOME (an agent harness's) keeps its
    sandbox HOMEs under that HOME's cache, where no other environment points;
    a later run with the usual environment must not read what a command left
    there (the list of state places every session writes)."""
    require_runner(runner)
    agent_home = caller.base / "agent-home"
    agent_home.mkdir()
    caller.own(agent_home)
    flags = ("--profile", caller.profile()) if runner == "landlock" else ()
    secret = f"dsh-agent-home-{secrets.token_hex(8)}"
    agent_env = {**caller.env(), "HOME": str(agent_home)}
    wrote = caller.run("run", "--runner", runner, *flags, "-c", f"echo {secret} > \"$HOME/token\"", env=agent_env)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    homes = agent_home / ".cache" / "dsh-sandbox" / "home"
    assert any(homes.glob("*/token")), "the agent's run left no file in its sandbox HOME"
    reader = caller.run("run", "--runner", runner, *flags, "--mode", "read-only", "-c",
                        f"cat {homes}/*/token 2>&1; echo reader-done")
    assert "reader-done" in reader.stdout, reader.stdout + reader.stderr
    assert secret not in reader.stdout + reader.stderr, reader.stdout + reader.stderr
