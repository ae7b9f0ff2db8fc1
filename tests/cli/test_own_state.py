"""dsh-sandbox's own installation and state, and what Landlock shares with the
host (namespaces, the process list), attacked through the real CLI and real
runners, as root and as nobody; every verdict is host state or what the command
could print.

Each caller gets a private HOME (so ``~/.cache/dsh-sandbox``, ``~/.dsh`` and
``~/.config/dsh-sandbox`` are the test's own) and a workspace beside it, both
under /var/tmp (outside every default writable root).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import LANDLOCK_ACCEPT, NOBODY, cli, docker_group
from tests.support.require import require_runner

USERS = ["caller", "nobody"]
PYVER = f"python{sys.version_info.major}.{sys.version_info.minor}"


@dataclass(frozen=True)
class Caller:
    base: Path
    user: str

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def ws(self) -> Path:
        return self.base / "ws"

    @property
    def uid(self) -> int:
        return NOBODY if self.user == "nobody" else os.geteuid()

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.home), "LANG": "C.UTF-8", **extra}

    def run(self, *args: str, python: list[str] | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if self.user == "nobody":
            kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            [*(python or cli(self.user)), *args], cwd=cwd or self.ws, env=env or self.env(), capture_output=True,
            encoding="utf-8", errors="replace", timeout=240, check=False, **kwargs,
        )

    def own(self, *paths: Path) -> None:
        """Give what the test made to the user the command runs as."""
        if self.user != "nobody":
            return
        for path in paths:
            for dirpath, dirnames, filenames in os.walk(path):
                for name in (dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)):
                    os.lchown(name, NOBODY, NOBODY)

    def profile(self) -> str:
        path = self.base / "landlock.toml"
        path.write_text('extends = "workspace-write"\n' + LANDLOCK_ACCEPT)
        path.chmod(0o644)
        return str(path)


@pytest.fixture(params=USERS)
def caller(request: pytest.FixtureRequest) -> Iterator[Caller]:
    user: str = request.param
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="dsh-own-state-", dir="/var/tmp")).resolve()
    os.chmod(base, 0o755)
    found = Caller(base, user)
    found.home.mkdir()
    found.ws.mkdir()
    found.own(found.home, found.ws)
    try:
        yield found
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- dsh-sandbox installed inside the workspace ------------------------------------------
def _venv_in_workspace(caller: Caller) -> Path:
    """``ws/.venv`` running this checkout's dsh-sandbox (its site-packages is
    added by a .pth, as any installed package's would be)."""
    base = "/usr/bin/python3"
    if not os.path.exists(base) or not os.path.exists(f"/usr/bin/{PYVER}"):
        pytest.skip(f"SANDBOX_UNAVAILABLE: no /usr/bin/{PYVER} to make a venv with")
    venv = caller.ws / ".venv"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # The packages of the interpreter the caller runs the CLI with: nobody cannot
    # read this process's own when they lie under /root (a root checkout's .venv).
    python = cli(caller.user)[0]
    ours = subprocess.run(
        [python, "-c", "import site; print(next(p for p in site.getsitepackages() if p.endswith('site-packages')))"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    (venv / "lib" / PYVER / "site-packages" / "dsh-link.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    caller.own(venv)
    return venv


def test_dsh_sandbox_installed_in_the_workspace_refuses_workspace_write(caller: Caller) -> None:
    require_runner("bwrap")
    venv = _venv_in_workspace(caller)
    python = [str(venv / "bin" / "python"), "-P", "-m", "dsh.cli"]
    evil = venv / "lib" / PYVER / "site-packages" / "evil.pth"
    marker = caller.home / "ran-at-start"
    plant = f"echo 'import os; open({str(marker)!r}, \"w\")' > {evil}"
    done = caller.run("run", "--runner", "bwrap", "-c", plant, python=python)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"workspace: refusing to make {caller.ws} writable" in done.stderr
    assert str(venv) in done.stderr and "pipx install dsh-sandbox" in done.stderr and "Traceback" not in done.stderr
    assert not evil.exists()
    caller.run("-c", "pass", python=[str(venv / "bin" / "python")])  # the next start of that interpreter
    assert not marker.exists()
    # Read-only makes nothing writable: it still runs, and cannot plant either.
    ro = caller.run("run", "--runner", "bwrap", "--mode", "read-only", "-c", plant + " || echo refused",
                    python=python)
    assert ro.returncode == 0 and ro.stdout == "refused\n", ro.stdout + ro.stderr
    assert not evil.exists()


IMPORT_PATH = {
    "python -m": ("", None),  # the working directory goes first on the import path
    "PYTHONPATH=.": ("-P", "."),
    "PYTHONPATH=src": ("-P", "src"),  # relative, and not there yet: the run could make it
    "empty PYTHONPATH entry": ("-P", "/var/tmp/dsh-no-such-dir:"),
}


@pytest.mark.parametrize("how", IMPORT_PATH)
def test_a_workspace_on_the_clis_import_path_refuses_workspace_write(caller: Caller, how: str) -> None:
    """A module planted in a directory on the CLI's own import path
    (``sitecustomize.py``, ``dsh/__init__.py``) runs at its next start, as the
    user, outside any sandbox: the workspace is not made writable then."""
    require_runner("bwrap")
    flag, pythonpath = IMPORT_PATH[how]
    python = [p for p in cli(caller.user) if p != "-P"]
    if flag:
        python.insert(1, flag)
    env = caller.env(**({"PYTHONPATH": pythonpath} if pythonpath else {}))
    marker = caller.home / "ran-at-start"
    plant = (f"mkdir -p src && for d in . src; do echo 'open({str(marker)!r}, \"w\")' > $d/sitecustomize.py; "
             "mkdir -p $d/dsh && cp $d/sitecustomize.py $d/dsh/__init__.py; done")
    done = caller.run("run", "--runner", "bwrap", "-c", plant, python=python, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"workspace: refusing to make {caller.ws} writable" in done.stderr, done.stderr
    assert "import path" in done.stderr and "python -P -m dsh.cli" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (caller.ws / "sitecustomize.py").exists() and not (caller.ws / "src").exists()
    # The same start with nothing writable on its import path runs.
    ok = caller.run("run", "--runner", "bwrap", "-c", "echo ran", python=cli(caller.user))
    assert ok.returncode == 0 and ok.stdout == "ran\n", ok.stdout + ok.stderr
    assert not marker.exists()


# -- dsh-sandbox's state as a writable root ------------------------------------------------
STATE = [".cache/dsh-sandbox", ".cache/dsh-sandbox/spill", ".cache/dsh-sandbox/home/other-0123456789ab",
         ".cache", ".dsh", ".config/dsh-sandbox", "run/dsh-sandbox", "run", "/var/tmp"]


@pytest.mark.parametrize("where", STATE)
def test_dsh_sandbox_state_is_never_a_writable_root(caller: Caller, where: str) -> None:
    require_runner("bwrap")
    root = Path(where) if where.startswith("/") else caller.home / where
    if where.startswith("run"):
        root = caller.base / where  # $XDG_RUNTIME_DIR's spill directory
    root.mkdir(parents=True, exist_ok=True)
    if (caller.base / "run").exists():
        (caller.base / "run").chmod(0o700)  # a runtime directory as the XDG spec has it
        caller.own(caller.home, caller.base / "run")
    else:
        caller.own(caller.home)
    env = caller.env(XDG_RUNTIME_DIR=str(caller.base / "run"))
    for force in ((), ("--force-writable", str(root))):
        done = caller.run("run", "--runner", "bwrap", "--writable", str(root), *force, "--", "touch", "ran",
                          env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"--writable {root}: refusing to make {root} writable" in done.stderr
        assert "of dsh-sandbox" in done.stderr and "--force-writable cannot lift this" in done.stderr
        assert not (caller.ws / "ran").exists()


def test_a_refused_workspace_holding_the_cache_is_left_as_it_was(caller: Caller) -> None:
    """The refusal comes before the sandbox HOME is made: a cache inside the
    workspace got the HOMEs directory made in it all the same."""
    require_runner("bwrap")
    caller.own(caller.home)
    before = sorted(p.name for p in caller.ws.iterdir())
    done = caller.run("run", "--runner", "bwrap", "--", "touch", "ran",
                      env=caller.env(XDG_CACHE_HOME=str(caller.ws / "cache")))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"workspace: refusing to make {caller.ws} writable" in done.stderr
    assert sorted(p.name for p in caller.ws.iterdir()) == before


# -- the escalation log where runs write ---------------------------------------------------
@pytest.mark.parametrize("where", [".cache/dsh-sandbox/home/ws-0123456789ab/.dsh", ".cache/dsh-sandbox/x"])
def test_an_escalation_log_where_runs_write_is_refused(caller: Caller, where: str) -> None:
    """A sandbox HOME is writable by its runs: a DSH_HOME inside one (or in
    any of dsh-sandbox's run state) would let a plain run forge the record a
    later escalation trusts."""
    require_runner("bwrap")
    caller.own(caller.home)
    log_dir = caller.home / where
    for mode in ("workspace-write", "read-only"):
        done = caller.run("run", "--runner", "bwrap", "--mode", mode, "--", "touch", "ran",
                          env=caller.env(DSH_HOME=str(log_dir)))
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"DSH_HOME {log_dir}" in done.stderr and "set DSH_HOME to a directory outside it" in done.stderr
        assert "Traceback" not in done.stderr
        assert not (caller.ws / "ran").exists()
    ok = caller.run("run", "--runner", "bwrap", "--", "touch", "ran",
                    env=caller.env(DSH_HOME=str(caller.home / ".dsh")))
    assert ok.returncode == 0, ok.stdout + ok.stderr


# -- other runs' state, hidden ---------------------------------------------------------------
@pytest.mark.parametrize("runner", ["landlock", "bwrap", "docker"])
def test_other_workspaces_homes_and_spill_files_are_unreadable(caller: Caller, runner: str) -> None:
    if runner == "docker" and caller.user == "nobody" and not docker_group():
        pytest.skip("SANDBOX_UNAVAILABLE: docker: no docker group lets nobody reach the daemon")
    require_runner(runner)
    cache = caller.home / ".cache" / "dsh-sandbox"
    other = cache / "home" / "other-0123456789ab"
    spill = cache / "spill" / "session-1-0123456789ab"
    for directory in (other, spill):
        directory.mkdir(parents=True, mode=0o700)
    home_secret, spill_secret = (f"dsh-{what}-{secrets.token_hex(8)}" for what in ("home", "spill"))
    (other / ".git-credentials").write_text(f"https://me:{home_secret}@example.invalid\n")
    (spill / "stdout-0123456789ab.log").write_text(f"danger-full-access output {spill_secret}\n")
    caller.own(caller.home)
    flags = ("--profile", caller.profile()) if runner == "landlock" else ()
    script = (f"cat {other}/.git-credentials {spill}/*; cat {cache}/spill/*/* {cache}/home/*/.git-credentials; "
              'touch "$HOME/own" && echo own-home-ok')
    done = caller.run("run", "--runner", runner, *flags, "-c", script)
    seen = done.stdout + done.stderr
    assert home_secret not in seen and spill_secret not in seen, seen
    assert "own-home-ok" in done.stdout, seen  # the run's own HOME stays writable


@pytest.mark.parametrize("runner", ["bwrap", "docker"])
def test_a_workspace_inside_another_workspaces_home_never_shows_that_home(caller: Caller, runner: str) -> None:
    """A repository made at another workspace's sandbox HOME encloses a
    workspace made inside it: the enclosing work tree is shown, but that HOME
    stays hidden, whatever masks the runner leaves out of what it shows."""
    if runner == "docker" and caller.user == "nobody" and not docker_group():
        pytest.skip("SANDBOX_UNAVAILABLE: docker: no docker group lets nobody reach the daemon")
    require_runner(runner)
    other = caller.home / ".cache" / "dsh-sandbox" / "home" / "other-0123456789ab"
    (other / "proj").mkdir(parents=True, mode=0o700)
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    secret = f"dsh-home-{secrets.token_hex(8)}"
    (other / "token.txt").write_text(secret + "\n")
    caller.own(caller.home)
    done = caller.run("run", "--runner", runner, "--mode", "read-only", "--keep-warm", "0", "-c",
                      "cat ../token.txt; ls -a ..", cwd=other / "proj")
    seen = done.stdout + done.stderr
    assert secret not in seen and "token.txt" not in done.stdout, seen


@pytest.mark.parametrize("runner", ["landlock", "bwrap"])
def test_a_read_only_run_among_the_sandbox_homes_reads_none_of_them(caller: Caller, runner: str) -> None:
    """Run from the directory of the sandbox HOMEs (read-only: it can never be a
    writable root): the others stay hidden, or the run is refused for what the
    runner cannot hide, never shown."""
    require_runner(runner)
    homes = caller.home / ".cache" / "dsh-sandbox" / "home"
    other = homes / "other-0123456789ab"
    other.mkdir(parents=True, mode=0o700)
    secret = f"dsh-home-{secrets.token_hex(8)}"
    (other / "token.txt").write_text(secret + "\n")
    caller.own(caller.home)
    flags = ("--accept-degraded", "landlock-process-list") if runner == "landlock" else ()
    done = caller.run("run", "--runner", runner, "--mode", "read-only", *flags, "-c", "cat */token.txt", cwd=homes)
    seen = done.stdout + done.stderr
    assert secret not in seen, seen
    if runner == "landlock":
        assert done.returncode == 125 and "landlock-hidden-paths" in done.stderr, seen


# -- Landlock and the host's namespaces and processes ------------------------------------------
USERNS = (
    "import ctypes\nL = ctypes.CDLL(None, use_errno=True)\nL.syscall.restype = ctypes.c_long\n"
    "for name, call in (('userns', lambda: L.unshare(0x10000000)), ('netns', lambda: L.unshare(0x40000000)),"
    " ('fsopen', lambda: L.syscall(ctypes.c_long(430), b'tmpfs', ctypes.c_long(0))),"
    " ('chroot', lambda: L.chroot(b'/'))):\n"
    "    print(name, 'ok' if call() >= 0 else 'refused', flush=True)\n"
)


def test_landlock_refuses_a_user_namespace_and_what_it_would_give(caller: Caller) -> None:
    require_runner("landlock")
    flags = ("--runner", "landlock", "--profile", caller.profile())
    done = caller.run("run", *flags, "-c", "unshare -U grep CapEff /proc/self/status; echo rc=$?")
    assert "CapEff" not in done.stdout and "rc=1" in done.stdout, done.stdout + done.stderr
    attempt = caller.run("run", *flags, "--", sys.executable if caller.user != "nobody" else "python3",
                         "-c", USERNS)
    assert attempt.stdout.split() == ["userns", "refused", "netns", "refused", "fsopen", "refused",
                                      "chroot", "refused"], attempt.stdout + attempt.stderr


def test_a_host_process_argv_is_hidden_or_the_gap_is_declared(caller: Caller) -> None:
    require_runner("bwrap")
    require_runner("landlock")
    secret = f"dsh-argv-{secrets.token_hex(8)}"
    victim = subprocess.Popen(["sh", "-c", "sleep 300; :", secret], stdin=subprocess.DEVNULL)
    read = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
    try:
        hidden = caller.run("run", "--runner", "bwrap", "--mode", "read-only", "-c", read)
        assert hidden.returncode == 0 and secret not in hidden.stdout, hidden.stderr
        refused = caller.run("run", "--runner", "landlock", "--mode", "read-only", "-c", read)
        assert refused.returncode == 125 and secret not in refused.stdout, refused.stdout + refused.stderr
        assert "landlock-process-list" in refused.stderr and "--accept-degraded landlock-process-list" in refused.stderr
        # Accepted by name, the gap is real (and reported): the argv is readable.
        # (nobody has no writable cgroup here: containment is another gap, accepted too)
        accepted = caller.run("run", "--runner", "landlock", "--mode", "read-only", "--accept-degraded",
                              "landlock-process-list,landlock-process-escape", "-c", read)
        assert accepted.returncode == 0 and secret in accepted.stdout, accepted.stderr
    finally:
        victim.kill()
        victim.wait()


# -- a gVisor session's state, out of other runs' reach ------------------------------------------
def _runsc_roots(uid: int) -> set[Path]:
    """The ``-root`` of every runsc process of ``uid`` (where it keeps a sandbox's state)."""
    out: set[Path] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"runsc") for a in argv[:1]) and b"-root" in argv:
            out.add(Path(os.fsdecode(argv[argv.index(b"-root") + 1])))
    return out


def test_a_gvisor_sessions_state_is_not_where_other_runs_write(caller: Caller) -> None:
    """The bundle (``config.json``, the mounts runsc makes) and runsc's state
    are rewritable by any run that may write where they are: never in
    ``$TMPDIR`` (here inside the workspace, which runs write), always in
    dsh-sandbox's own state, which no run can see and no root may hold."""
    require_runner("gvisor")
    require_runner("bwrap")
    tmpdir = caller.ws / ".tmp"
    tmpdir.mkdir()
    caller.own(tmpdir)
    env = caller.env(TMPDIR=str(tmpdir))
    kwargs: dict[str, object] = {}
    if caller.user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    waiting = subprocess.Popen(  # type: ignore[call-overload]
        [*cli(caller.user), "run", "--runner", "gvisor", "--", "sh", "-c", "echo waiting; read go; echo done"],
        cwd=caller.ws, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, **kwargs)
    try:
        assert waiting.stdout is not None and waiting.stdout.readline() == "waiting\n"
        roots = _runsc_roots(caller.uid)
        assert roots, "no runsc process of the caller found while its command waits"
        assert not list(tmpdir.iterdir()), list(tmpdir.iterdir())
        for root in roots:
            state = root.parent  # the session's directory: the bundles beside runsc's state
            assert not state.is_relative_to(caller.ws) and not state.is_relative_to("/tmp"), state
            # Another run of the same user can neither make it writable nor see it.
            wide = caller.run("run", "--runner", "bwrap", "--writable", str(state.parent), "--", "true", env=env)
            assert wide.returncode == 2 and "refusing" in wide.stderr, wide.stdout + wide.stderr
            look = caller.run("run", "--runner", "bwrap", "--mode", "read-only", "--", "ls", "-A", str(state),
                              env=env)
            assert "bundles" not in look.stdout and "runsc" not in look.stdout, look.stdout + look.stderr
    finally:
        out, err = waiting.communicate("go\n", timeout=120)
    assert waiting.returncode == 0 and out == "done\n", out + err
