"""Workspace sync in and out per mode, and attacks on the sync-back.

Every attack test also writes a legitimate file: nothing at all may land on
the host when any member is bad, and nothing outside the workspace ever.
"""

from __future__ import annotations

import os
import shlex
import sys
import tarfile
from pathlib import Path

import pytest
from dsh.runners.e2b import E2BRunner
from dsh.sandbox.runner import ExitStatus

from tests.runners.e2b.conftest import Envd
from tests.runners.e2b.helpers import policy, run, sandbox_path, start
from tests.support.wait import PATIENCE_S

REFUSED = b"sync-back refused, nothing was written to the host"
# The envd double runs commands on this machine: use this interpreter, not
# whatever `python3` a version manager resolves from the command's directory.
# The base interpreter, not a venv's: the emulated machine sees /usr and the base
# prefix only, and the fake tar needs nothing but the standard library.
PYTHON = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def snapshot(tree: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry under ``tree`` with its kind and content (or link target)."""
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(tree))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            elif path.is_dir():
                out[rel] = ("dir", b"")
            else:
                out[rel] = ("file", path.read_bytes())
    return out


def test_sync_in_copies_the_workspace(runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    (workspace / "sub/deep").mkdir(parents=True)
    (workspace / "sub/deep/f.txt").write_bytes(b"deep\xff")
    (workspace / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (workspace / "run.sh").chmod(0o755)
    (workspace / "secret").write_text("s")
    (workspace / "secret").chmod(0o600)
    (workspace / "hidden.env").write_text("TOKEN=1")
    os.symlink("sub/deep/f.txt", workspace / "link")
    pol = policy("read-only", workspace, hidden_paths=(workspace / "hidden.env",))
    ran = run(runner, ["sh", "-c", "./run.sh; cat link; cat secret; test -e hidden.env || echo no"],
              pol)
    assert ran.stdout == b"ran\ndeep\xffsno\n"
    remote = sandbox_path(envd.root, workspace)
    assert os.readlink(remote / "link") == "sub/deep/f.txt"


def test_read_only_never_syncs_back(runner: E2BRunner, workspace: Path) -> None:
    (workspace / "a.txt").write_text("original")
    before = snapshot(workspace)
    # The read-only user cannot write the sandbox's copy (as in E2B); whatever
    # happened there, the host never sees it.
    ran = run(runner, ["sh", "-c", "echo changed > a.txt; echo new > b.txt"],
              policy("read-only", workspace))
    assert ran.status != ExitStatus(0) and b"Permission denied" in ran.stderr
    assert snapshot(workspace) == before


def test_read_only_writes_do_not_leak_through_a_later_write_command(
        runner: E2BRunner, workspace: Path) -> None:
    """A read-only command's writes stay out even when a later command syncs back
    (in a real sandbox ``dsh-ro`` cannot write the workspace at all; the double
    cannot switch users, so this checks the host side only for new files)."""
    (workspace / "a.txt").write_text("original")
    run(runner, ["true"], policy("read-only", workspace))
    ran = run(runner, ["sh", "-c", "echo rw > rw.txt"], policy("workspace-write", workspace))
    assert ran.status == ExitStatus(0)
    assert (workspace / "rw.txt").read_text() == "rw\n"
    assert (workspace / "a.txt").read_text() == "original"


def test_workspace_write_syncs_regular_files_back(runner: E2BRunner, workspace: Path) -> None:
    (workspace / "keep.txt").write_text("keep")
    (workspace / "edit.txt").write_text("old")
    (workspace / "gone.txt").write_text("still here")
    script = ("echo new > edit.txt; mkdir -p n/m; printf '\\377' > n/m/bin.dat; "
              "printf '#!/bin/sh\\n' > tool; chmod +x tool; rm gone.txt; exit 5")
    ran = run(runner, ["sh", "-c", script], policy("workspace-write", workspace))
    assert ran.status == ExitStatus(5)  # a failing command still syncs what it wrote
    assert (workspace / "edit.txt").read_text() == "new\n"
    assert (workspace / "n/m/bin.dat").read_bytes() == b"\xff"
    assert os.access(workspace / "tool", os.X_OK)
    assert (workspace / "keep.txt").read_text() == "keep"
    assert not (workspace / "gone.txt").exists()  # deleted in the sandbox, untouched here
    assert b"dsh: e2b" not in ran.stderr


def test_host_changes_reach_the_sandbox_before_each_command(
        runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    (workspace / "a.txt").write_text("one")
    (workspace / "old.txt").write_text("old")
    pol = policy("read-only", workspace)
    assert run(runner, ["cat", "a.txt"], pol).stdout == b"one"
    (workspace / "a.txt").write_text("two, longer")
    (workspace / "old.txt").unlink()
    (workspace / "dir").mkdir()
    (workspace / "dir/new.txt").write_text("new")
    ran = run(runner, ["sh", "-c", "cat a.txt dir/new.txt; test -e old.txt || echo gone"], pol)
    assert ran.stdout == b"two, longernewgone\n"
    assert not (sandbox_path(envd.root, workspace) / "old.txt").exists()


def test_host_edits_during_a_command_are_not_overwritten(
        runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    (workspace / "a.txt").write_text("before")
    pol = policy("workspace-write", workspace)
    # The test reaches into the double's machine to tell the command to go on.
    script = "while [ ! -e /tmp/go ]; do sleep 0.05; done; echo out > b.txt"
    proc, _out = start(runner, ["sh", "-c", script], pol)
    (workspace / "a.txt").write_text("edited on the host meanwhile")
    (envd.root / "tmp/go").touch()
    assert proc.wait(PATIENCE_S) == ExitStatus(0)
    assert (workspace / "a.txt").read_text() == "edited on the host meanwhile"
    assert (workspace / "b.txt").read_text() == "out\n"
    assert run(runner, ["cat", "a.txt"], pol).stdout == b"edited on the host meanwhile"


def test_protected_changes_are_undone_in_the_sandbox(runner: E2BRunner, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git/config").write_text("[core]\n")
    pol = policy("workspace-write", workspace)
    run(runner, ["sh", "-c", "echo '[evil]' > .git/config"], pol)
    assert run(runner, ["cat", ".git/config"], pol).stdout == b"[core]\n"


def test_danger_full_access_syncs_back(envd: Envd, workspace: Path) -> None:
    runner = E2BRunner({"sandbox_url": envd.url})
    try:
        ran = run(runner, ["sh", "-c", "echo root > by-root.txt"],
                  policy("danger-full-access", workspace, network=True))
        assert ran.status == ExitStatus(0)
        assert (workspace / "by-root.txt").read_text() == "root\n"
    finally:
        runner.close()


def test_protected_paths_are_never_written_back(runner: E2BRunner, workspace: Path) -> None:
    (workspace / ".git").mkdir()
    (workspace / ".git/config").write_text("[core]\n")
    (workspace / ".envrc").write_text("safe")
    pol = policy("workspace-write", workspace,
                 protected_paths=(workspace / ".git", workspace / ".dsh", workspace / ".envrc"))
    script = ("echo evil >> .git/config; echo hook > .git/post-checkout; mkdir -p .dsh sub/.git; "
              "echo x > .dsh/policy; echo y > sub/.git/HEAD; echo evil > .envrc; echo ok > ok.txt")
    ran = run(runner, ["sh", "-c", script], pol)
    assert ran.status == ExitStatus(0)
    assert (workspace / ".git/config").read_text() == "[core]\n"
    assert not (workspace / ".git/post-checkout").exists()
    assert not (workspace / ".dsh").exists() and not (workspace / "sub/.git").exists()
    assert (workspace / ".envrc").read_text() == "safe"
    assert (workspace / "ok.txt").read_text() == "ok\n"
    assert b"not synced back (protected path stays read-only): .git/config" in ran.stderr


def _attack(runner: E2BRunner, workspace: Path, script: str) -> bytes:
    (workspace / "a.txt").write_text("host")
    before = snapshot(workspace)
    parent_before = sorted(os.listdir(workspace.parent))
    ran = run(runner, ["sh", "-c", script + "; echo legit > ok.txt; echo x > a.txt"],
              policy("workspace-write", workspace))
    assert ran.status == ExitStatus(0)
    assert snapshot(workspace) == before, "something was synced despite a bad member"
    assert sorted(os.listdir(workspace.parent)) == parent_before
    return ran.stderr


@pytest.mark.parametrize(("script", "why"), [
    ("mkfifo pipe", b"is a fifo"),
])
def test_bad_members_refuse_the_whole_sync_back(runner: E2BRunner, workspace: Path,
                                                script: str, why: bytes) -> None:
    stderr = _attack(runner, workspace, script)
    assert REFUSED in stderr and why in stderr


LEFT_IN_SANDBOX = b"not synced back (a symlink stays in the sandbox): "


def test_new_symlinks_stay_in_the_sandbox_and_the_rest_comes_back(runner: E2BRunner,
                                                                  workspace: Path) -> None:
    ww = policy("workspace-write", workspace)
    ran = run(runner, ["sh", "-c", "ln -s /etc etc-link; ln -s ../../outside.txt rel-link; "
                                   "mkdir d && ln -s d d-link && echo ok > d/ok.txt"], ww)
    assert ran.status == ExitStatus(0) and REFUSED not in ran.stderr, ran.stderr
    assert (workspace / "d/ok.txt").read_text() == "ok\n"
    for link in ("etc-link", "rel-link", "d-link"):
        assert not os.path.lexists(workspace / link)
        assert LEFT_IN_SANDBOX + link.encode() in ran.stderr
    # Named once, not after every later command.
    ran = run(runner, ["sh", "-c", "test -L etc-link && echo again > d/ok.txt"], ww)
    assert ran.status == ExitStatus(0) and LEFT_IN_SANDBOX not in ran.stderr, ran.stderr
    assert (workspace / "d/ok.txt").read_text() == "again\n"


def test_socket_is_not_synced_but_the_rest_is(runner: E2BRunner, workspace: Path) -> None:
    script = (f"{shlex.quote(PYTHON)} -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; "
              "echo ok > ok.txt")
    ran = run(runner, ["sh", "-c", script], policy("workspace-write", workspace))
    assert ran.status == ExitStatus(0)
    assert (workspace / "ok.txt").read_text() == "ok\n"
    assert not (workspace / "sock").exists()


def test_writes_outside_the_workspace_stay_in_the_sandbox(
        runner: E2BRunner, envd: Envd, workspace: Path) -> None:
    run(runner, ["sh", "-c", "echo out > ../outside.txt; mkdir -p ../x; echo y > ../x/y"],
        policy("danger-full-access", workspace, network=True))  # root may write ..
    assert (sandbox_path(envd.root, workspace.parent) / "outside.txt").exists()  # in the sandbox
    assert not (workspace.parent / "outside.txt").exists()
    assert not (workspace.parent / "x").exists()


def _install_evil_tar(envd: Envd, members: list[tuple[str, bytes, bytes]]) -> None:
    """A compromised sandbox (root can replace ``tar``): the sync-back archive
    is whatever the sandbox says.  The double's PATH starts with its shim dir.
    ``members``: (name, tar type byte, data or link name)."""
    script = f"""#!{PYTHON}
import io, sys, tarfile
out = sys.argv[sys.argv.index("-cf") + 1]
with tarfile.open(out, "w") as tar:
    for name, kind, data in {members!r}:
        info = tarfile.TarInfo(name)
        info.type = kind
        if kind == tarfile.REGTYPE:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        else:
            info.linkname = data.decode()
            tar.addfile(info)
"""
    tar = envd.root / ".envd-double/bin/tar"
    tar.write_text(script)
    tar.chmod(0o755)


@pytest.mark.parametrize(("evil", "why"), [
    (("../escape.txt", tarfile.REGTYPE, b"pwned"), b"'..' component"),
    (("sub/../../escape.txt", tarfile.REGTYPE, b"pwned"), b"'..' component"),
    (("./../escape.txt", tarfile.REGTYPE, b"pwned"), b"'..' component"),
    (("/escape.txt", tarfile.REGTYPE, b"pwned"), b"absolute path"),
    (("passwd", tarfile.LNKTYPE, b"/etc/passwd"), b"is a hardlink"),
    (("copy", tarfile.LNKTYPE, b"a.txt"), b"is a hardlink"),
    (("null", tarfile.CHRTYPE, b""), b"is a character device"),
    (("ok.txt/inner", tarfile.REGTYPE, b"x"), b"inside a file"),
])
def test_crafted_archives_are_refused(runner: E2BRunner, envd: Envd, workspace: Path,
                                      evil: tuple[str, bytes, bytes], why: bytes) -> None:
    (workspace / "a.txt").write_text("host")
    pol = policy("workspace-write", workspace)
    assert run(runner, ["true"], pol).status == ExitStatus(0)  # setup with the real tar
    before = snapshot(workspace)
    _install_evil_tar(envd, [("ok.txt", tarfile.REGTYPE, b"legit"), evil])
    ran = run(runner, ["true"], pol)
    assert REFUSED in ran.stderr and why in ran.stderr
    assert snapshot(workspace) == before
    assert not (workspace.parent / "escape.txt").exists()
    assert not Path("/escape.txt").exists()


def test_a_crafted_file_below_a_new_symlink_is_refused(runner: E2BRunner, envd: Envd,
                                                      workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    pol = policy("workspace-write", workspace)
    assert run(runner, ["true"], pol).status == ExitStatus(0)
    _install_evil_tar(envd, [("ok.txt", tarfile.REGTYPE, b"legit"),
                             ("out", tarfile.SYMTYPE, str(outside).encode()),
                             ("out/planted", tarfile.REGTYPE, b"pwned")])
    ran = run(runner, ["true"], pol)
    assert REFUSED in ran.stderr and b"inside a file" in ran.stderr
    assert os.listdir(outside) == [] and not (workspace / "ok.txt").exists()


def test_hardlinks_come_back_as_copies(runner: E2BRunner, workspace: Path) -> None:
    ran = run(runner, ["sh", "-c", "echo h > h1; ln h1 h2"], policy("workspace-write", workspace))
    assert b"dsh: e2b" not in ran.stderr
    assert (workspace / "h1").read_text() == (workspace / "h2").read_text() == "h\n"
    assert (workspace / "h1").stat().st_ino != (workspace / "h2").stat().st_ino


def test_unchanged_host_symlinks_do_not_block_sync_back(runner: E2BRunner,
                                                        workspace: Path) -> None:
    (workspace / "real.txt").write_text("r")
    os.symlink("real.txt", workspace / "alias")
    os.symlink("/etc/hostname", workspace / "abs-alias")
    ran = run(runner, ["sh", "-c", "echo ok > ok.txt"], policy("workspace-write", workspace))
    assert b"dsh: e2b" not in ran.stderr
    assert (workspace / "ok.txt").read_text() == "ok\n"
    assert os.readlink(workspace / "alias") == "real.txt"
    # Re-pointing a synced-in symlink is a new symlink: the host keeps its own.
    ran = run(runner, ["sh", "-c", "ln -sfn /etc alias; echo again > ok.txt"],
              policy("workspace-write", workspace))
    assert LEFT_IN_SANDBOX + b"alias" in ran.stderr and REFUSED not in ran.stderr
    assert (workspace / "ok.txt").read_text() == "again\n"
    assert os.readlink(workspace / "alias") == "real.txt"


def test_a_refused_sync_back_does_not_block_later_ones(runner: E2BRunner, workspace: Path) -> None:
    ww = policy("workspace-write", workspace)
    ran = run(runner, ["sh", "-c", "mkfifo escape; echo first > a.txt"], ww)
    assert REFUSED in ran.stderr
    assert not (workspace / "a.txt").exists() and not os.path.lexists(workspace / "escape")
    # The sandbox's copy was rebuilt from the host: the next command syncs back.
    ran = run(runner, ["sh", "-c", "test ! -e escape && echo second > b.txt"], ww)
    assert ran.status == ExitStatus(0) and REFUSED not in ran.stderr, ran.stderr
    assert (workspace / "b.txt").read_text() == "second\n"
    assert not (workspace / "a.txt").exists() and not os.path.lexists(workspace / "escape")


def test_host_symlink_in_a_parent_is_never_followed(
        runner: E2BRunner, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("untouched")
    os.symlink(outside, workspace / "link")
    os.symlink(outside / "target", workspace / "conf")
    for script in ("rm link; mkdir link; echo pwned > link/target",
                   "rm conf; echo pwned > conf"):
        ran = run(runner, ["sh", "-c", f"{script}; echo ok > ok.txt"],
                  policy("workspace-write", workspace))
        assert REFUSED in ran.stderr and b"is a symlink on the host" in ran.stderr
        assert (outside / "target").read_text() == "untouched"
        assert not (workspace / "ok.txt").exists()
        run(runner, ["sh", "-c", "rm -rf link conf ok.txt; ln -s " + shlex.quote(str(outside))
                     + " link; ln -s " + shlex.quote(str(outside / "target")) + " conf"],
            policy("read-only", workspace))


@pytest.mark.slow
def test_ten_thousand_files_sync_back(runner: E2BRunner, workspace: Path) -> None:
    for d in range(100):
        sub = workspace / f"d{d:02}"
        sub.mkdir()
        for f in range(100):
            (sub / f"f{f:02}.txt").write_text(f"{d}/{f}\n")
    script = ("import pathlib\n"
              "for p in pathlib.Path('.').glob('d*/f*.txt'): p.write_text(p.read_text() + 'x')\n"
              "for i in range(100): pathlib.Path(f'new{i}.txt').write_text(str(i))\n")
    ran = run(runner, ["python3", "-c", script], policy("workspace-write", workspace),
              deadline_s=PATIENCE_S)
    assert ran.status == ExitStatus(0), ran.stderr
    assert b"dsh: e2b" not in ran.stderr
    assert (workspace / "d42/f17.txt").read_text() == "42/17\nx"
    assert all((workspace / f"d{d:02}/f99.txt").read_text().endswith("x") for d in range(100))
    assert (workspace / "new99.txt").read_text() == "99"
