"""``run --runner docker`` keeps its container warm for the next run of the
same workspace and policy: what the next run gets, what it must never get
(another workspace's or policy's container, a container bound to a replaced
directory, anything the last command left running), and that every kept
container goes: once idle, when its policy changes, when its keeper dies,
with whatever runs in it when the process using it is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import CLI_TIMEOUT_S, cli
from tests.support.sandboxed import need_runner
from tests.support.wait import PATIENCE_S, wait_until

KEEP = ("--runner", "docker", "--keep-warm", "120")
SHAPE = "dsh-sandbox.shape"
WORKSPACE = "dsh-sandbox.workspace"


@pytest.fixture(autouse=True)
def _docker() -> None:
    need_runner("docker")


def _client() -> object:
    from dsh.runners.docker.client import connect

    return connect()


def _kept(workspace: Path) -> list[dict[str, object]]:
    """The running kept containers of ``workspace``."""
    client = _client()
    try:
        return list(client.api.containers(filters={"label": f"{WORKSPACE}={workspace}"}))  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]


def _exists(container_id: str) -> bool:
    from docker.errors import NotFound

    client = _client()
    try:
        client.api.inspect_container(container_id)  # type: ignore[attr-defined]
        return True
    except NotFound:
        return False
    finally:
        client.close()  # type: ignore[attr-defined]


def _labels(container_id: str) -> dict[str, str]:
    client = _client()
    try:
        return dict(client.api.inspect_container(container_id)["Config"]["Labels"])  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


@pytest.fixture
def ws(workspace: Path) -> Iterator[Path]:
    """The workspace; its kept containers are removed after the test."""
    yield workspace
    _remove_kept(workspace)


def _remove_kept(workspace: Path) -> None:
    from dsh.runners.docker.keeper import purge

    ids = [str(info["Id"]) for info in _kept(workspace)]
    ids += [str(info["Id"]) for info in _kept(workspace.parent / (workspace.name + ".old"))]
    if ids:
        purge(ids)


def _run(workspace: Path, *args: str, keep: tuple[str, ...] = KEEP) -> bytes:
    done = cli("run", *keep, *args, cwd=workspace)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def _host(workspace: Path, *flags: str) -> str:
    """The id prefix of the container the run used (its host name)."""
    return _run(workspace, *flags, "--", "cat", "/etc/hostname").decode().strip()


def _full_id(workspace: Path, prefix: str) -> str:
    ids = [str(info["Id"]) for info in _kept(workspace) if str(info["Id"]).startswith(prefix)]
    assert len(ids) == 1, (prefix, ids)
    return ids[0]


def test_the_next_run_of_the_workspace_and_policy_reuses_the_container(ws: Path) -> None:
    first = _host(ws)
    assert _host(ws) == first
    cid = _full_id(ws, first)
    labels = _labels(cid)
    # Owned by its keeper, which outlives the run that made it.
    keeper = int(labels["dsh-sandbox.owner-pid"])
    assert keeper != os.getpid() and _alive(keeper)
    with open(f"/proc/{keeper}/cmdline", "rb") as fh:
        assert b"dsh-docker-parked" in fh.read().split(b"\0")
    # No session's private directory is bound: the container's own /tmp is $TMPDIR.
    client = _client()
    try:
        binds = [m["Source"] for m in client.api.inspect_container(cid)["Mounts"]]  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]
    assert not [b for b in binds if "/dsh-sandbox/tmp/session-" in b], binds
    note = f"dsh-kept-note-{os.getpid()}"
    out = _run(ws, "--", "sh", "-c", f'echo "$TMPDIR"; echo kept > "$TMPDIR/{note}"; touch made-here')
    assert out == b"/tmp\n" and (ws / "made-here").exists()
    assert not os.path.lexists(f"/tmp/{note}")  # the container's own /tmp, never the host's
    assert _run(ws, "--", "cat", f"/tmp/{note}") == b"kept\n"  # the same workspace and policy: documented


def test_nothing_a_run_started_is_running_when_the_next_one_starts(ws: Path) -> None:
    script = (
        "setsid nohup sleep 987 >/dev/null 2>&1 & "
        "env -i /bin/sh -c 'setsid sleep 988 >/dev/null 2>&1 &' ; "
        "(sleep 989 &) ; echo started"
    )
    assert _run(ws, "--", "sh", "-c", script) == b"started\n"
    listing = _run(ws, "--", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo")
    assert b"sleep 98" not in listing, listing


def test_another_workspace_or_policy_never_gets_the_container(ws: Path, tmp_path: Path) -> None:
    other = (tmp_path / "other").resolve()
    other.mkdir()
    try:
        mine = _host(ws)
        theirs = _host(other)
        assert theirs != mine
        assert _run(other, "--", "sh", "-c", f"ls {ws} 2>&1; echo rc=$?").endswith(b"rc=2\n")
        assert _host(ws) == mine
        # Another policy for the same workspace: another container, and the
        # idle one of the old policy goes.
        narrowed = _host(ws, "--mode", "read-only")
        assert narrowed not in (mine, theirs)
        assert not [i for i in _kept(ws) if str(i["Id"]).startswith(mine)]
        assert [i for i in _kept(other) if str(i["Id"]).startswith(theirs)]  # another workspace's stays
    finally:
        _remove_kept(other)


def test_a_replaced_workspace_gets_a_new_container_bound_to_the_new_directory(ws: Path) -> None:
    first = _host(ws)
    (ws / "old-file").write_text("old")
    ws.rename(ws.parent / (ws.name + ".old"))
    ws.mkdir()
    (ws / "new-file").write_text("new")
    out = _run(ws, "--", "sh", "-c", "cat /etc/hostname; ls")
    host, *names = out.decode().split()
    assert host != first
    assert names == ["new-file"]


@pytest.mark.parametrize("replace", ["git config (a rename over .git/config)", "an editor's save of .envrc",
                                     "hooks moved aside and made again"])
def test_a_protected_path_the_host_replaced_is_never_writable_in_the_kept_container(ws: Path, replace: str) -> None:
    """The host replacing a protected path (a rename over a file, a directory
    moved aside) detaches the container's read-only bind of it: the next run
    must not take that container back and find the path writable."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(ws)], check=True)
    subprocess.run([*git, "-C", str(ws), "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    (ws / ".envrc").write_text("export A=1\n")
    targets = {"git config": ".git/config", "an editor": ".envrc", "hooks": ".git/hooks/pre-commit"}
    target = next(v for k, v in targets.items() if replace.startswith(k))
    first = _host(ws)
    if target == ".git/config":
        subprocess.run(["git", "-C", str(ws), "config", "user.name", "hostuser"], check=True)
    elif target == ".envrc":
        (ws / ".envrc.tmp").write_text("export A=2\n")
        os.rename(ws / ".envrc.tmp", ws / ".envrc")
    else:
        os.rename(ws / ".git" / "hooks", ws / ".git" / "hooks.old")
        (ws / ".git" / "hooks").mkdir()
    before = (ws / target).read_bytes() if (ws / target).exists() else None
    done = cli("run", *KEEP, "--", "sh", "-c", f"cat /etc/hostname; echo planted >> {target}", cwd=ws)
    after = (ws / target).read_bytes() if (ws / target).exists() else None
    assert after == before, (replace, done.stderr.decode(errors="replace"))
    assert done.returncode != 0
    assert done.stdout.decode().split()[0] != first, "the container whose bind went away was taken back"


def test_placeholders_stand_while_the_container_is_kept_and_go_with_it(ws: Path) -> None:
    """A missing protected path is bound read-only from an empty directory the
    host makes (``.dsh`` here): it stands in the workspace as long as the kept
    container binds it, stays empty whatever a run tries, and goes with it."""
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    host = _host(ws, "--keep-warm", "3")
    assert (ws / ".dsh").is_dir() and not any((ws / ".dsh").iterdir())
    out = _run(ws, "--keep-warm", "3", "--", "sh", "-c",
               "echo x > .dsh/config.toml; mkdir .dsh/sub; rmdir .dsh; cat /etc/hostname")
    assert out.split()[-1].decode() == host
    assert (ws / ".dsh").is_dir() and not any((ws / ".dsh").iterdir())
    cid = _full_id(ws, host)
    wait_until(lambda: not _exists(cid), "the idle container to be removed")
    wait_until(lambda: not (ws / ".dsh").exists(), "its placeholder to be removed with it")


def test_an_idle_container_goes_with_its_keeper(ws: Path) -> None:
    host = _host(ws, "--keep-warm", "1")
    cid = _full_id(ws, host)
    keeper = int(_labels(cid)["dsh-sandbox.owner-pid"])
    wait_until(lambda: not _exists(cid), "the idle container to be removed")
    wait_until(lambda: not _alive(keeper), "its keeper to exit")


def test_a_container_whose_keeper_died_is_never_reused_and_is_reaped(ws: Path) -> None:
    first = _host(ws)
    cid = _full_id(ws, first)
    os.kill(int(_labels(cid)["dsh-sandbox.owner-pid"]), signal.SIGKILL)
    assert _host(ws) != first
    assert not _exists(cid)


def test_keep_warm_zero_removes_the_container_at_exit(ws: Path) -> None:
    _host(ws, "--keep-warm", "0")
    assert _kept(ws) == []
    client = _client()
    try:
        mine = client.api.containers(all=True, filters={"label": "dsh-sandbox"})  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]
    assert not [c for c in mine if str(ws) in str(c.get("Labels", {}).get("dsh-sandbox.protected", ""))]


def test_two_runs_at_once_never_share_a_container(ws: Path) -> None:
    """A kept container serves one run at a time: a run cannot see another
    run's processes (their environment, their stdin and stdout) any more than
    under a container of its own."""
    first = _host(ws)
    argv = [sys.executable, "-P", "-m", "dsh.cli", "run", *KEEP, "--env", "MY_API_TOKEN=hunter2", "--",
            "sh", "-c", "echo up; sleep 3; cat /etc/hostname; echo done"]
    with subprocess.Popen(argv, cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as slow:
        assert slow.stdout is not None
        assert slow.stdout.readline() == b"up\n"
        spy = _run(ws, "--", "sh", "-c", "cat /etc/hostname; "
                   "for p in /proc/[0-9]*; do grep -l hunter2 $p/environ 2>/dev/null; done; echo end")
        out, err = slow.communicate(timeout=CLI_TIMEOUT_S)
    assert slow.returncode == 0, err
    assert out == f"{first}\ndone\n".encode()
    other, *seen = spy.decode().split()
    assert other != first and seen == ["end"], spy


LEFTOVERS = {
    # The main thread ends while another runs: /proc shows a zombie, the thread goes on.
    "a zombie's thread": (
        "import os, sys, threading, time, ctypes\n"
        "if os.fork() == 0:\n"
        "    os.dup2(os.open(os.devnull, os.O_RDWR), 0); os.dup2(0, 1); os.dup2(0, 2)\n"
        "    def loop():\n"
        "        while True:\n"
        "            open(sys.argv[1], 'a').write('x')\n"
        "            time.sleep(0.2)\n"
        "    threading.Thread(target=loop).start()\n"
        "    time.sleep(0.5)\n"
        "    ctypes.CDLL(None).syscall(60, 0)\n"
        "time.sleep(1)\n"
    ),
    # A child of the command's parent, outside the container: no parent inside.
    "a CLONE_PARENT child": (
        "import ctypes, os, sys, time\n"
        "pid = ctypes.CDLL(None, use_errno=True).syscall(56, 0x8000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n"
        "    os.execve('/bin/sh', ['sh', '-c', 'exec </dev/null >/dev/null 2>&1; '\n"
        "              'while :; do echo x >> ' + sys.argv[1] + '; sleep 0.2; done'],\n"
        "              {'PATH': '/usr/bin:/bin'})\n"
        "time.sleep(1)\n"
    ),
}


@pytest.mark.parametrize("trick", sorted(LEFTOVERS))
def test_a_process_the_exit_sweep_misses_takes_the_container_with_it(ws: Path, trick: str) -> None:
    first = _host(ws)
    cid = _full_id(ws, first)
    (ws / "left.py").write_text(LEFTOVERS[trick])
    # The command itself, not a child of a shell: a CLONE_PARENT child's parent is then outside.
    _run(ws, "--", "python3", "left.py", f"{ws}/leak")
    assert (ws / "leak").exists(), "the trick did not run: the check would be vacuous"
    wait_until(lambda: not _exists(cid), "the container running a leftover to be removed")
    before = (ws / "leak").read_bytes()
    time.sleep(1.0)
    assert (ws / "leak").read_bytes() == before, "the leftover still runs"
    assert _host(ws) != first


def test_a_fifo_planted_for_the_kill_script_neither_hangs_the_run_nor_spares_a_daemon(ws: Path) -> None:
    """The command may write the directory of pid files the exit sweep reads:
    its own pid file replaced by a FIFO must not block the sweep (the run would
    hang, SIGTERM included, with the daemon running), nor a later run's start."""
    plant = ('f=$(grep -l "^$$ " /run/dsh-sandbox/*); rm "$f"; mkfifo "$f"; mkfifo /run/dsh-sandbox/extra; '
             'setsid sh -c "while :; do date >> $PWD/leak; sleep 0.2; done" </dev/null >/dev/null 2>&1 & echo planted')
    first = _host(ws)
    assert _run(ws, "--", "sh", "-c", plant) == b"planted\n"
    before = (ws / "leak").read_bytes()
    time.sleep(1.0)
    assert (ws / "leak").read_bytes() == before, "the daemon outlived the run"
    assert _host(ws) == first  # the next run starts in it


def test_a_use_file_dated_in_the_future_removes_its_container(ws: Path) -> None:
    """A run that may change file times (Landlock with ``landlock-metadata``
    accepted) could date a use file in 2100 to keep its container forever."""
    from dsh.runners.docker.parked import Parking

    first = _host(ws)
    cid = _full_id(ws, first)
    parking = Parking(1)
    try:
        os.utime(cid, (4102444800, 4102444800), dir_fd=parking.fd)
    finally:
        parking.close()
    wait_until(lambda: not _exists(cid), "its keeper to remove the container")


def test_a_host_mount_under_the_workspace_that_went_away_is_not_carried_over(ws: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: mounting needs root")
    other = (tmp_path / "other").resolve()
    other.mkdir()
    (other / "secret").write_text("other's\n")
    (ws / "sub").mkdir()
    subprocess.run(["mount", "--bind", str(other), str(ws / "sub")], check=True)
    try:
        first = _host(ws)
        assert _run(ws, "--", "cat", "sub/secret") == b"other's\n"
    finally:
        subprocess.run(["umount", str(ws / "sub")], check=True)
    out = _run(ws, "--", "sh", "-c", "cat /etc/hostname; ls sub; echo pwn > sub/planted")
    words = out.decode().split()  # the host name, and nothing in sub: the mount is gone
    assert len(words) == 1 and words[0] != first, out
    assert not (other / "planted").exists() and (ws / "sub" / "planted").exists()


def test_a_killed_run_takes_the_kept_container_and_its_command_with_it(ws: Path) -> None:
    first = _host(ws)
    cid = _full_id(ws, first)
    argv = [sys.executable, "-P", "-m", "dsh.cli", "run", *KEEP, "--", "sh", "-c", "echo up; exec sleep 600"]
    with subprocess.Popen(argv, cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as run:
        assert run.stdout is not None
        assert run.stdout.readline() == b"up\n"
        run.kill()
        run.wait(timeout=PATIENCE_S)
    wait_until(lambda: not _exists(cid), "the container to be removed with the killed run")
    assert _host(ws) != first


@pytest.mark.parametrize("taken_back", [False, True], ids=["made-by-the-run", "taken-back"])
def test_a_run_killed_with_its_own_keeper_leaves_nothing_running(ws: Path, taken_back: bool) -> None:
    """The worst case: the process using a kept container and the keeper that
    would remove the container with it are both SIGKILLed mid-command.  The
    use file still says "in use": the container goes with the command, within
    seconds and without waiting for a next run."""
    from dsh.runners.docker.keeper import KEEPER_NAME

    from tests.support.processes import pids_with

    earlier = _host(ws) if taken_back else None
    loop = "while :; do date >> f; sleep 0.2; done"
    argv = [sys.executable, "-P", "-m", "dsh.cli", "run", *KEEP, "--", "sh", "-c", loop]
    with subprocess.Popen(argv, cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as run:
        wait_until(lambda: (ws / "f").exists() and len((ws / "f").read_bytes().splitlines()) >= 2,
                   "the command's first lines")
        kept = _kept(ws)
        assert len(kept) == 1
        cid = str(kept[0]["Id"])
        assert earlier is None or cid.startswith(earlier)
        keepers = [pid for pid in pids_with(KEEPER_NAME) if _parent(pid) == run.pid]
        assert len(keepers) == 1, keepers
        os.kill(keepers[0], signal.SIGKILL)
        run.kill()
        run.wait(timeout=PATIENCE_S)
    wait_until(lambda: not _exists(cid), "the container the dead run used to be removed")
    before = (ws / "f").read_bytes()
    time.sleep(1.0)
    assert (ws / "f").read_bytes() == before, "the command kept running after its run and keeper died"
    assert _host(ws) != cid[:12]


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def test_a_workspace_no_label_can_name_gets_a_container_of_its_own_each_run(tmp_path: Path) -> None:
    odd = (tmp_path / "tab\there").resolve()
    odd.mkdir()
    first = _host(odd)
    assert _host(odd) != first
    client = _client()
    try:
        labelled = client.api.containers(filters={"label": "dsh-sandbox.shape"})  # type: ignore[attr-defined]
    finally:
        client.close()  # type: ignore[attr-defined]
    assert not [c for c in labelled if str(c["Id"]).startswith(first)]


@pytest.mark.parametrize("value", ["-1", "nan", "86401", "soon"])
def test_a_bad_keep_warm_is_refused_before_anything_runs(ws: Path, value: str) -> None:
    done = cli("run", "--runner", "docker", "--keep-warm", value, "--", "touch", "ran", cwd=ws)
    assert done.returncode == 2, done.stderr
    assert b"--keep-warm" in done.stderr and b"Traceback" not in done.stderr
    assert not (ws / "ran").exists()
    assert _kept(ws) == []


def test_no_sandboxed_run_can_reach_the_use_files_the_keepers_trust(ws: Path) -> None:
    """A keeper removes its container when the use file is old or gone, and a
    run takes the container back by it: the files lie in the runner's private
    state directory, which every run hides and no run may make writable."""
    from dsh.runners.docker.parked import Parking

    _host(ws)
    parking = Parking(1)
    place = parking.path
    parking.close()
    assert any(len(name) == 64 for name in os.listdir(place))
    need_runner("bwrap")
    out = _run(ws, "--", "sh", "-c", f"ls {place} 2>&1; echo rc=$?", keep=("--runner", "bwrap"))
    assert b"rc=0" not in out and not any(len(word) == 64 for word in out.split()), out
    refused = cli("run", "--runner", "bwrap", "--writable", str(place), "--", "true", cwd=ws)
    assert refused.returncode == 2 and str(place).encode() in refused.stderr, refused.stderr
