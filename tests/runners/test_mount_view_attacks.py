"""Attacks on the one mount plan, through the real CLI and the real runners,
each judged from the host: a hidden path moved aside by one run for the next
to read; names whose bytes Python calls whitespace (mount checks that cut
them short refused every later run); a FIFO or a socket beside hidden
entries (a runtime that opens what it binds blocked or failed); a tree too
deep for gVisor to start (a clean refusal, as on bwrap)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.require import require_runner
from tests.support.runners import nobody_python

NOBODY = 65534

PLAN_RUNNERS = ["bwrap", "gvisor", "docker"]


@pytest.fixture
def base(trusted_dir: Path) -> Path:
    # Outside /tmp, which is a writable root of every run (and no covering
    # mask is ever planned beneath it).
    (trusted_dir / "ws").mkdir()
    return trusted_dir


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _run(base: Path, runner: str, *argv: str, profile: str | None = None, as_nobody: bool = False
         ) -> tuple[int, str, str]:
    args = ["run", "--runner", runner]
    if profile is not None:
        (base / "prof.toml").write_text(profile)
        args += ["--profile", str(base / "prof.toml")]
    env = {**os.environ, "HOME": str(base)}
    if as_nobody:
        python = nobody_python()
        assert python is not None
        env.pop("XDG_RUNTIME_DIR", None)
        env.pop("XDG_CACHE_HOME", None)
        done = subprocess.run([python, "-P", "-m", "dsh.cli", *args, "--", *argv], cwd=base / "ws", env=env,
                              capture_output=True, timeout=180, check=False, preexec_fn=_drop)
    else:
        done = cli(*args, "--", *argv, cwd=base / "ws", env=env)
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


# Docker as nobody translates the same plan; its own tests run it so.
@pytest.mark.parametrize(("runner", "who"), [(r, w) for r in PLAN_RUNNERS for w in ("root", "nobody")
                                             if (r, w) != ("docker", "nobody")])
def test_a_hidden_path_cannot_be_moved_aside_for_the_next_run(base: Path, runner: str, who: str) -> None:
    require_runner(runner)
    nobody = who == "nobody"
    if nobody:
        if os.geteuid() != 0 or nobody_python() is None:
            pytest.skip("SANDBOX_UNAVAILABLE: DSH_NOBODY_PYTHON is not set (an interpreter nobody can run)")
    ws = base / "ws"
    (ws / "config").mkdir()
    (ws / "config" / "secret").write_text("TOPSECRET\n")
    if nobody:
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(base)], check=True)
    profile = 'extends = "workspace-write"\nhidden_paths = ["config/secret"]\n'
    code, out, err = _run(base, runner, "sh", "-c",
                          "mv config config2 && mkdir config && echo decoy > config/secret; echo tried",
                          profile=profile, as_nobody=nobody)
    assert code == 0 and "tried" in out, err
    assert (ws / "config" / "secret").read_text() == "TOPSECRET\n" and not (ws / "config2").exists()
    code, out, err = _run(base, runner, "sh", "-c", "cat config/secret config2/secret; true", profile=profile,
                          as_nobody=nobody)
    assert code == 0, err
    assert "TOPSECRET" not in out


@pytest.mark.parametrize("odd", ["\x1c", "\u2028", "\xa0"])
@pytest.mark.parametrize("runner", ["bwrap", "gvisor"])
def test_a_repository_under_a_name_python_calls_whitespace_leaves_the_workspace_usable(
        base: Path, runner: str, odd: str) -> None:
    require_runner(runner)
    repo = base / "ws" / f"a{odd}b"
    (repo / ".git" / "hooks").mkdir(parents=True)
    code, out, err = _run(base, runner, "sh", "-c", f'echo x > "{repo}/.git/hooks/pre-commit" || echo refused')
    assert code == 0 and "refused" in out, err
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize("runner", ["bwrap", "gvisor"])
def test_a_fifo_or_socket_beside_hidden_entries_is_no_false_denial(base: Path, runner: str, kind: str) -> None:
    require_runner(runner)
    data = base / "data"
    data.mkdir()
    for name in ("s1", "s2", "s3"):
        (data / name).write_text(f"SECRET-{name}\n")
    held = None
    if kind == "fifo":
        os.mkfifo(data / "other")
    else:
        held = socket.socket(socket.AF_UNIX)
        held.bind(str(data / "other"))
        held.listen()
    try:
        profile = 'extends = "workspace-write"\nhidden_paths = [' + ", ".join(
            f'"{data / n}"' for n in ("s1", "s2", "s3")) + "]\n"
        code, out, err = _run(base, runner, "sh", "-c", f'cat "{data}"/s1 "{data}"/s2; echo "{data}"/*; echo ran',
                              profile=profile)
        assert code == 0 and "ran" in out, err
        assert "SECRET" not in out and f"{data}/other" in out
    finally:
        if held is not None:
            held.close()


def test_a_tree_too_deep_for_gvisor_is_a_clean_refusal(base: Path) -> None:
    require_runner("gvisor")
    fd = os.open(base / "ws", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ["d"] * 230 + [".git"]:
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.mkdir("hooks", dir_fd=fd)
    finally:
        os.close(fd)
    try:
        code, _out, err = _run(base, "gvisor", "true")
        assert code == 125, err
        assert "directories deep" in err and "--runner landlock" in err and "cannot start a sandbox here" not in err
    finally:
        # Deeper than shutil's recursion likes.
        subprocess.run(["rm", "-rf", "--one-file-system", str(base / "ws")], check=False, timeout=120)


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def in_tmp() -> Iterator[Path]:
    # Beneath the host's /tmp, which a private /tmp hides and a container never shows.
    made = Path(tempfile.mkdtemp(prefix="dsh-view-tmp-", dir="/tmp")).resolve()
    os.chmod(made, 0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("how", ["gitdir", "commondir"])
@pytest.mark.parametrize("runner", PLAN_RUNNERS)
def test_a_git_file_a_run_plants_shows_the_next_run_nothing_of_the_host(
        base: Path, in_tmp: Path, runner: str, how: str) -> None:
    """A ``.git`` file is the command's to write (``git init`` must work);
    what it names is shown to a later run only when that git dir names the
    ``.git`` file in return, as git records worktrees and submodules."""
    require_runner(runner)
    secret = in_tmp / "secret"
    secret.mkdir(mode=0o700)
    (secret / "data").write_text("HOST-SECRET\n")
    if how == "gitdir":
        plant = f"printf 'gitdir: {secret}\\n' > .git"
    else:  # a git dir in the workspace whose commondir names the host path
        plant = f"mkdir -p sub && echo {secret} > sub/commondir && echo '{secret}' > sub/gitdir && " \
                "printf 'gitdir: sub\\n' > .git"
    code, out, err = _run(base, runner, "sh", "-c", f"cat {secret}/data; {plant} && echo planted")
    assert code == 0 and "planted" in out and "HOST-SECRET" not in out, err
    code, out, err = _run(base, runner, "sh", "-c", f"cat {secret}/data; true")
    assert "HOST-SECRET" not in out, (code, err)


@pytest.mark.parametrize("runner", PLAN_RUNNERS)
def test_a_worktree_workspace_still_finds_its_repository(in_tmp: Path, runner: str) -> None:
    """The other side: a real worktree's git dir and common dir (in the main
    checkout, beneath the host's /tmp here) point back to it and stay shown."""
    require_runner(runner)
    main = in_tmp / "main"
    main.mkdir()
    _git("init", "-q", cwd=main)
    (main / "f").write_text("x\n")
    _git("add", "f", cwd=main)
    _git("commit", "-qm", "one", cwd=main)
    _git("worktree", "add", "-q", str(in_tmp / "wt"), cwd=main)
    done = cli("run", "--runner", runner, "--", "git", "log", "--oneline", cwd=in_tmp / "wt",
               env={**os.environ, "HOME": str(in_tmp)})
    assert done.returncode == 0 and b"one" in done.stdout, done.stderr.decode(errors="replace")


@pytest.mark.parametrize("repos", [18, 40])
def test_many_nested_repositories_run_on_gvisor_or_are_a_clean_refusal(base: Path, repos: int) -> None:
    """Each nested repository keeps its .git parts read-only (about ten binds);
    runsc fails to boot past about 237 binds, which a command can reach by
    running ``git init`` 40 times: a clean refusal naming the count, not a
    start that "cannot run here"."""
    require_runner("gvisor")
    for i in range(repos):
        _git("init", "-q", f"r{i}", cwd=base / "ws")
    code, out, err = _run(base, "gvisor", "echo", "hello")
    if repos == 18:
        assert code == 0 and out == "hello\n", err
    else:
        assert code == 125, err
        assert "host paths" in err and "--runner bwrap" in err and "cannot start a sandbox here" not in err
