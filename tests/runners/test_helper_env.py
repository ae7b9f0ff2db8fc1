"""Host-side helpers never see the command's loader variables.

An earlier sandboxed run plants a library in a writable root; the next run
names it with ``--env LD_PRELOAD=...`` or ``--env LD_LIBRARY_PATH=...``.  The
library's constructor appends the process's uid and command line to a file
outside every writable root (only a process on the host can write there:
``unshare``, ``bwrap``, ``prlimit``, ``setpriv``, ``timeout``) and to one in the
workspace (any process of the run, sandboxed or not, in workspace-write).
The command itself may load it (that is inside the sandbox); no helper may.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.support.cli import cli, runner_flags, trusted_config_dir
from tests.support.require import need_cgroup, require_runner

MARK_C = textwrap.dedent("""
    #include <fcntl.h>
    #include <stdio.h>
    #include <unistd.h>
    __attribute__((constructor)) static void mark(void) {
      char cmd[900] = {0}, line[1024];
      int c = open("/proc/self/cmdline", O_RDONLY);
      int n = c >= 0 ? read(c, cmd, sizeof cmd - 1) : 0;
      if (c >= 0) close(c);
      for (int i = 0; i < n; i++) if (!cmd[i]) cmd[i] = ' ';
      int len = snprintf(line, sizeof line, "uid=%d %s\\n", (int)getuid(), cmd);
      const char *paths[] = {MARK_OUT, MARK_IN};
      for (int i = 0; i < 2; i++) {
        int fd = open(paths[i], O_WRONLY | O_CREAT | O_APPEND, 0666);
        if (fd >= 0) { write(fd, line, len); close(fd); }
      }
    }
""")
STUB_C = "void dsh_stub(void) {}\n"
# Without a limit, bwrap is the only helper; with these, prlimit (file size),
# setpriv + timeout (wall time) and the cgroup join shell (processes) too.
LIMITS = '[limits]\nwall_time_s = 600\nmax_file_size = 100000000\nmax_processes = 200\n'


def _cc(*args: str) -> None:
    cc = shutil.which("cc")
    assert cc is not None, "a C compiler (cc) is needed to build the planted library; tests/run.sh installs gcc"
    subprocess.run([cc, "-shared", "-fPIC", *args], check=True, capture_output=True)


def _build(staging: Path, outside: Path, inside: Path) -> None:
    """``libmark.so`` (for LD_PRELOAD) and a ``libcap.so.2`` that bwrap loads through
    LD_LIBRARY_PATH: the marker plus the real libcap under another name."""
    marks = [f'-DMARK_OUT="{outside}"', f'-DMARK_IN="{inside}"']
    (staging / "mark.c").write_text(MARK_C)
    (staging / "stub.c").write_text(STUB_C)
    _cc(*marks, "-o", str(staging / "libmark.so"), str(staging / "mark.c"))
    real = next(p for p in (Path("/lib/x86_64-linux-gnu/libcap.so.2"), Path("/lib/aarch64-linux-gnu/libcap.so.2"),
                            Path("/usr/lib64/libcap.so.2"), Path("/lib64/libcap.so.2")) if p.exists())
    _cc("-o", str(staging / "libcapreal.so.2"), "-Wl,-soname,libcapreal.so.2", str(staging / "stub.c"))
    _cc(*marks, "-o", str(staging / "libcap.so.2"), "-Wl,-soname,libcap.so.2", "-Wl,--no-as-needed",
        f"-L{staging}", "-l:libcapreal.so.2", str(staging / "mark.c"))
    shutil.copyfile(real, staging / "libcapreal.so.2")
    (staging / "mark.c").unlink()
    (staging / "stub.c").unlink()


@pytest.fixture
def planted(workspace: Path) -> tuple[Path, Path, Path]:
    """(lib dir in the workspace, outside marker, inside marker), the libraries
    copied into the workspace by a sandboxed run."""
    staging = trusted_config_dir() / f"libs-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    staging.chmod(0o755)
    outside = trusted_config_dir() / f"mark-{uuid.uuid4().hex[:8]}"
    inside = workspace / "marks"
    _build(staging, outside, inside)
    plant = cli("run", "--runner", "bwrap", "--mode", "workspace-write", "--", "cp", "-r", str(staging), "lib",
                cwd=workspace)
    assert plant.returncode == 0, plant.stderr
    shutil.rmtree(staging)
    return workspace / "lib", outside, inside


def _profile(mode: str, limits: bool, runner: str) -> Path:
    accept = ('accept_degraded = ["landlock-protected-paths", "landlock-metadata", "landlock-process-list"]\n'
              if runner == "landlock" else "")
    path = trusted_config_dir() / f"helper-env-{runner}-{mode}-{limits}.toml"
    path.write_text(f'extends = "{mode}"\n{accept}{LIMITS if limits else ""}')
    return path


def _helpers_in(lines: list[str]) -> list[str]:
    """Lines of processes other than the command (``uid=N sh -c ...``); a helper's
    argv ends with the command's, so only its start tells them apart."""
    return [line for line in lines if not line.split(" ", 1)[1].startswith("sh -c ")]


@pytest.mark.parametrize("variable", ["LD_PRELOAD", "LD_LIBRARY_PATH"])
@pytest.mark.parametrize("limits", [False, True], ids=["plain", "limits"])
@pytest.mark.parametrize("mode", ["read-only", "workspace-write"])
def test_bwrap_helpers_never_load_a_planted_library(
        variable: str, limits: bool, mode: str, planted: tuple[Path, Path, Path]) -> None:
    require_runner("bwrap")
    if limits:
        need_cgroup("pids")
    lib, outside, inside = planted
    value = str(lib / "libmark.so") if variable == "LD_PRELOAD" else str(lib)
    done = cli("run", "--runner", "bwrap", "--profile", str(_profile(mode, limits, "bwrap")),
               "--env", f"{variable}={value}", "--", "sh", "-c", f'echo "${variable}"', "DSH-THE-COMMAND",
               cwd=lib.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{value}\n".encode(), "the variable must still reach the command"
    assert not outside.exists(), f"a host-side helper loaded the planted library: {outside.read_text()}"
    if mode == "workspace-write" and variable == "LD_PRELOAD":
        lines = inside.read_text().splitlines()
        assert lines and not _helpers_in(lines), lines  # the command loaded it, nothing else did


def test_landlock_helpers_never_load_a_planted_library(planted: tuple[Path, Path, Path]) -> None:
    """Landlock's helpers (the cgroup join shell, prlimit) run inside its domain,
    but a library in them could skip the join or the limits: they never load it."""
    require_runner("landlock")
    need_cgroup("pids")
    lib, outside, inside = planted
    done = cli("run", *runner_flags("landlock")[:2], "--profile", str(_profile("workspace-write", True, "landlock")),
               "--env", f"LD_PRELOAD={lib / 'libmark.so'}", "--", "sh", "-c", "ulimit -f", "DSH-THE-COMMAND",
               cwd=lib.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"195312\n", "prlimit's file size limit applies"
    lines = inside.read_text().splitlines()
    assert lines and not _helpers_in(lines), lines
    assert not outside.exists()
