"""Hostile input to ``run`` and ``profile validate``: numbers, names and writable roots.

Each case must be refused with exit 2 and a message naming the field, before
anything runs, and ``profile validate`` must refuse exactly what ``run``
refuses: a value that slips through becomes a run without the limit.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.cli import cli

DANGER = ("--mode", "danger-full-access")
BAD_TIMEOUTS = ("inf", "-inf", "nan", "1e400", "Infinity", "1e99999", "", "0.0000001", "1e-400", "\uff11\uff12", "0x10")


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_bad_timeout_is_refused(workspace: Path, value: str) -> None:
    marker = workspace / "ran"
    done = cli("run", *DANGER, "--timeout", value, "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, (value, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr
    assert b"--timeout" in done.stderr
    assert not marker.exists()


def test_largest_finite_timeout_is_capped_not_dropped(workspace: Path) -> None:
    done = cli("run", *DANGER, "--timeout", "1e308", "--", "true", cwd=workspace)
    assert b"Traceback" not in done.stderr
    assert done.returncode == 2 or b"--timeout capped at" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["1e-400", "\uff16\uff10\uff10", "inf", "-1", "0.0000001", "1e3"])
@pytest.mark.parametrize("source", ["flag", "env"])
def test_a_bad_keep_warm_names_where_it_came_from(workspace: Path, value: str, source: str) -> None:
    """``float`` would take ``1e-400`` as 0 (nothing kept, silently) and
    full-width digits as a number: the flag takes only what reads as one."""
    marker = workspace / "ran"
    flag = ("--keep-warm", value) if source == "flag" else ()
    env = {**os.environ, "DSH_SANDBOX_KEEP_WARM": value} if source == "env" else None
    done = cli("run", "--mode", "read-only", *flag, "--", "touch", str(marker), cwd=workspace, env=env)
    assert done.returncode == 2, (value, done.stderr)
    assert b"Traceback" not in done.stderr and b"--keep-warm" in done.stderr
    if source == "env":  # a bad number and one out of range both name the variable
        assert b"DSH_SANDBOX_KEEP_WARM" in done.stderr, done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("value", ["0", "0.5", "600", " 30 "])
def test_a_plain_keep_warm_is_taken(workspace: Path, value: str) -> None:
    done = cli("run", "--mode", "read-only", "--keep-warm", value, "--", "true", cwd=workspace)
    assert done.returncode == 0, (value, done.stderr)


BAD_LIMITS = {
    "wall_time_s inf": ("wall_time_s", "inf"),
    "wall_time_s nan": ("wall_time_s", "nan"),
    "wall_time_s 1e400": ("wall_time_s", "1e400"),
    "max_processes huge": ("max_processes", "1" + "0" * 30),
    "max_processes float": ("max_processes", "1e400"),
    "max_memory nan": ("max_memory", '"nan"'),
    "max_memory 1e400": ("max_memory", '"1e400"'),
    "max_memory negative": ("max_memory", '"-1GiB"'),
    "max_memory absurd": ("max_memory", '"99999999999EiB"'),
    "max_file_size inf": ("max_file_size", '"inf"'),
    # Below the floors no command starts: refused up front, not a SIGKILL or a daemon error.
    "wall_time_s below a millisecond": ("wall_time_s", "0.0000001"),
    "max_processes 1": ("max_processes", "1"),
    "max_memory 1 byte": ("max_memory", "1"),
    "max_memory 8MiB": ("max_memory", '"8MiB"'),
}


@pytest.mark.parametrize("case", sorted(BAD_LIMITS))
def test_bad_limit_is_refused(workspace: Path, tmp_path: Path, case: str) -> None:
    key, value = BAD_LIMITS[case]
    profile = tmp_path / "p.toml"
    profile.write_text(f'extends = "workspace-write"\n[limits]\n{key} = {value}\n')
    validated = cli("profile", "validate", str(profile), cwd=workspace)
    assert validated.returncode == 2, (case, validated.stdout, validated.stderr)
    assert key.encode() in validated.stderr + validated.stdout
    marker = workspace / "ran"
    done = cli("run", *DANGER, "--profile", str(profile), "--", "touch", str(marker), cwd=workspace)
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr and key.encode() in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [("max_memory", "1", b"from 16 MiB to 1 PiB"), ("max_processes", "1", b"from 4 to"),
     ("wall_time_s", "0.0000001", b"from 1 ms to 366 days")],
)
@pytest.mark.parametrize("runner", ["bwrap", "docker"])
def test_limit_below_its_floor_names_field_range_and_fix(
    workspace: Path, tmp_path: Path, key: str, value: str, shown: bytes, runner: str
) -> None:
    """Sandboxed runs used to start and die (SIGKILL, "Cannot fork", a raw
    daemon error, an internal field name): now refused before anything runs."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'extends = "workspace-write"\n[limits]\n{key} = {value}\n')
    validated = cli("profile", "validate", str(profile), cwd=workspace)
    assert validated.returncode == 2 and shown in validated.stderr, validated.stderr
    done = cli("run", "--runner", runner, "--profile", str(profile), "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"limits.{key}".encode() in done.stderr and shown in done.stderr and b"write " in done.stderr
    assert b"Traceback" not in done.stderr and not (workspace / "ran").exists()


def test_unknown_degradation_name_is_refused(workspace: Path, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text('extends = "workspace-write"\naccept_degraded = ["landlock-protected-path"]\n')
    done = cli("profile", "validate", str(profile), cwd=workspace)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"landlock-protected-path" in done.stderr


@pytest.mark.parametrize("root", ["{home}/.ssh", "{home}", "{home}/.config/systemd"])
def test_dangerous_writable_root_is_refused(workspace: Path, tmp_path: Path, root: str) -> None:
    home = tmp_path / "home"
    path = Path(root.format(home=home))
    path.mkdir(parents=True, exist_ok=True)
    marker = workspace / "ran"
    env = {**os.environ, "HOME": str(home)}
    done = cli("run", "--mode", "workspace-write", "--writable", str(path), "--", "touch", str(marker),
               cwd=workspace, env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert os.fsencode(path) in done.stderr and b"Traceback" not in done.stderr
    assert not marker.exists()


# -- input files: bounded, typed, never blocking ----------------------------------------
def cli_bounded(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The CLI with 2 GiB of address space and 60 s: a reader of /dev/zero dies of
    MemoryError, a reader of a FIFO times out, instead of taking the machine with it."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    argv = [sys.executable, "-P", "-m", "dsh.cli", *args]
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=60, preexec_fn=limit,
                              check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"dsh-sandbox {' '.join(args)} blocked for 60 s")


def fifo(directory: Path) -> Path:
    path = directory / "fifo.toml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    ("flags", "kind"),
    [
        (("--profile", "/dev/zero"), b"is a character device, not a regular file"),
        (("--approval", "rules:/dev/zero"), b"is a character device, not a regular file"),
        (("--profile", "{fifo}"), b"is a FIFO, not a regular file"),
        (("--approval", "rules:{fifo}"), b"is a FIFO, not a regular file"),
        (("--composition", "{fifo}"), b"is a FIFO, not a regular file"),
        (("--profile", "{big}"), b"over the 1 MiB limit"),
    ],
)
def test_an_input_file_that_is_not_a_small_regular_file_is_refused(
    workspace: Path, trusted_dir: Path, flags: tuple[str, str], kind: bytes
) -> None:
    """Used to read /dev/zero until the OOM killer and hang on a FIFO forever."""
    big = trusted_dir / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    shown = tuple(f.format(fifo=fifo(trusted_dir) if "{fifo}" in f else "", big=big) for f in flags)
    done = cli_bounded("run", *shown, "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2, done.stderr[-2000:]
    assert kind in done.stderr and b"Traceback" not in done.stderr, done.stderr[-2000:]
    assert not (workspace / "ran").exists()


LONG = "a" * 300


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (("--writable", f"/tmp/{LONG}"), {}, b"--writable"),
        (("--workspace", f"/tmp/{LONG}"), {}, b"--workspace"),
        (("--profile", LONG), {}, b"profile"),
        (("--profile", f"/var/tmp/{LONG}.toml"), {}, b"profile"),
        ((), {"XDG_CONFIG_HOME": f"/tmp/{LONG}"}, b"XDG_CONFIG_HOME"),
        ((), {"TMPDIR": f"/tmp/{LONG}"}, b"TMPDIR"),
        ((), {"HOME": f"/tmp/{LONG}"}, b"HOME"),
        ((), {"XDG_CACHE_HOME": f"/tmp/{LONG}"}, b"XDG_CACHE_HOME"),
        ((), {"DSH_SANDBOX_PROFILE": f"/var/tmp/{LONG}.toml"}, b"DSH_SANDBOX_PROFILE"),
    ],
)
def test_a_name_over_the_kernels_limits_is_refused(
    workspace: Path, flags: tuple[str, ...], env: dict[str, str], named: bytes
) -> None:
    """A component over 255 bytes used to end in an OSError traceback."""
    done = cli("run", *flags, "--", "touch", "ran", cwd=workspace, env={**os.environ, **env})
    assert done.returncode == 2, (flags, env, done.stderr[-2000:])
    assert named in done.stderr and b"255-byte limit" in done.stderr, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr and not (workspace / "ran").exists()


@pytest.mark.parametrize(
    ("where", "text", "named"),
    [
        ("profile", 'home = "/var/tmp/a\\u0000b"\n', b"home"),
        ("profile", f'writable_roots = ["/var/tmp/{LONG}"]\n', b"writable_roots"),
        ("profile", f'extends = "{LONG}"\n', b"extends"),
        ("profile", 'description = "a\\u0000b"\n', b"description"),
        ("config", 'profile = "/var/tmp/a\\u0000b.toml"\n', b"profile"),
        ("config", 'approval = "rules:/var/tmp/a\\u0000b"\n', b"approval"),
        ("config", '[runners.docker]\nimage = "a\\u0000b"\n', b"runners.docker.image"),
        ("config", f'profile = "{LONG}"\n', b"profile"),
        ("config", f'trusted_projects = ["/var/tmp/{LONG}"]\n', b"trusted_projects"),
        ("config", f'[env]\nA = "{"x" * 140_000}"\n', b"env.A"),
    ],
)
def test_a_nul_or_overlong_value_in_a_file_is_refused(
    workspace: Path, trusted_dir: Path, where: str, text: str, named: bytes
) -> None:
    """NUL bytes and overlong names in profile and config values used to give
    tracebacks (or pass unnoticed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SANDBOX_")}
    env["XDG_CONFIG_HOME"] = str(trusted_dir)
    flags: tuple[str, ...] = ()
    if where == "profile":
        profile = trusted_dir / "p.toml"
        profile.write_text(text)
        flags = ("--profile", str(profile))
    else:
        (trusted_dir / "dsh-sandbox").mkdir()
        (trusted_dir / "dsh-sandbox" / "config.toml").write_text(text)
    done = cli("run", *flags, "--", "touch", "ran", cwd=workspace, env=env)
    assert done.returncode == 2, (text, done.stderr[-2000:])
    assert named in done.stderr and (b"NUL byte" in done.stderr or b"-byte limit" in done.stderr), done.stderr[:2000]
    assert b"Traceback" not in done.stderr and not (workspace / "ran").exists()


def test_deeply_nested_tool_json_is_refused(workspace: Path) -> None:
    """Used to be a RecursionError traceback."""
    nested = "[" * 20000 + "]" * 20000
    done = cli("tool", "call", "bash", nested, "--workspace", str(workspace), cwd=workspace)
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"nest deeper than" in done.stderr and b"Traceback" not in done.stderr


def test_a_nul_byte_in_a_tool_command_is_an_error_result(workspace: Path) -> None:
    """Used to return exit 0 with is_error false ("spawn failed")."""
    import json

    args = json.dumps({"command": f"touch {workspace}/ran\u0000; touch {workspace}/also", "description": "x"})
    done = cli("tool", "call", "bash", args, "--json", "--mode", "danger-full-access",
               "--workspace", str(workspace), cwd=workspace)
    result = json.loads(done.stdout)
    assert done.returncode == 1 and result["is_error"] is True, done.stdout
    assert "NUL byte" in result["content"], result
    assert list(workspace.iterdir()) == []


def test_an_unreadable_home_is_a_clear_error(trusted_dir: Path) -> None:
    """nobody with HOME=/root used to get a PermissionError traceback."""
    from tests.runners.test_trusted_files import NOBODY
    from tests.runners.test_trusted_files import cli as cli_as

    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    home = trusted_dir / "home"
    (home / ".config" / "dsh-sandbox").mkdir(parents=True)
    home.chmod(0o700)  # root's own, as /root is
    ws = trusted_dir / "ws"
    ws.mkdir()
    os.chown(ws, NOBODY, NOBODY)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}
    done = subprocess.run([*cli_as("nobody"), "run", "--", "touch", "ran"], cwd=ws, env=env, capture_output=True,
                          timeout=120, check=False, user=NOBODY, group=NOBODY, extra_groups=[])
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"cannot look for your config file" in done.stderr and b"set HOME" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr and not (ws / "ran").exists()


def test_profile_validate_lists_every_error_with_its_line_in_human_units(workspace: Path, trusted_dir: Path) -> None:
    """Used to stop at the first error, print 3.16224e+07 seconds, and give
    policy errors (a refused writable root) no line."""
    profile = trusted_dir / "p.toml"
    profile.write_text('modes = "read-only"\nnetwork = "no"\n[limits]\nwall_time_s = 1e9\nmax_memory = "1MiB"\n')
    done = cli("profile", "validate", str(profile), cwd=workspace)
    err = done.stderr.decode()
    assert done.returncode == 2 and "4 problems" in err, err
    for expected in ("unknown key 'modes' at line 1", "key 'network' at line 2",
                     "key 'limits.wall_time_s' at line 4: must be a number of seconds from 1 ms to 366 days",
                     "key 'limits.max_memory' at line 5: must be a size from 16 MiB to 1 PiB"):
        assert expected in err, (expected, err)
    assert "e+0" not in err
    profile.write_text('description = "x"\nwritable_roots = ["/etc"]\n')
    policy = cli("profile", "validate", str(profile), cwd=workspace)
    assert policy.returncode == 2 and f"{profile}:2: ".encode() in policy.stderr, policy.stderr


@pytest.mark.parametrize(
    "command",
    [("tool", "call", "bash", '{"command": "true", "description": "x"}'), ("profile", "validate", "read-only"),
     ("profile", "explain", "read-only"), ("config", "show")],
)
def test_an_overlong_workspace_is_refused_by_every_command(workspace: Path, command: tuple[str, ...]) -> None:
    done = cli(*command, "--workspace", f"/tmp/{LONG}", cwd=workspace)
    assert done.returncode == 2 and b"--workspace" in done.stderr and b"255-byte limit" in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("entry", "named"),
    [('{id: policy, name: sandbox-policy, config: {workspace: "/tmp/a\\0b"}}', b"'workspace'"),
     (f'{{id: policy, name: sandbox-policy, config: {{workspace: "/tmp/{LONG}"}}}}', b"'workspace'")],
)
def test_a_nul_or_overlong_value_in_a_composition_is_refused(
    workspace: Path, trusted_dir: Path, entry: str, named: bytes
) -> None:
    composition = trusted_dir / "c.yaml"
    composition.write_text(f"- {entry}\n- {{name: sandbox}}\n- {{name: bash-sandbox}}\n")
    done = cli("run", "--composition", str(composition), "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2 and named in done.stderr, done.stderr[-2000:]
    assert b"Traceback" not in done.stderr and not (workspace / "ran").exists()


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 6, 7, 8, 10, 13])
@pytest.mark.parametrize("stdin", ["pipe", "null"])
def test_a_process_limit_reached_is_a_clear_error(tmp_path: Path, limit: int, stdin: str) -> None:
    """At ``ulimit -u`` no thread or process can start: the run stops with a
    message that names the limit, never a traceback or another cause (a
    chroot, user namespaces), and a command that got to start is killed at
    once and said to have maybe run.  As nobody: root is not held to the limit."""
    from tests.runners.test_trusted_files import NOBODY
    from tests.runners.test_trusted_files import cli as cli_argv

    argv = cli_argv("nobody")
    base = Path(tempfile.mkdtemp(prefix="dsh-nproc-", dir="/var/tmp"))
    try:
        os.chmod(base, 0o755)
        workspace, home = base / "ws", base / "home"
        for directory in (workspace, home):
            directory.mkdir()
            os.chown(directory, NOBODY, NOBODY)
        marker = workspace / "ran"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}

        def at_the_limit() -> None:
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))

        done = subprocess.run([*argv, "run", "--runner", "bwrap", "--", "touch", str(marker)], cwd=workspace,
                              env=env, user=NOBODY, group=NOBODY, extra_groups=[], preexec_fn=at_the_limit,
                              input=b"" if stdin == "pipe" else None,
                              stdin=subprocess.DEVNULL if stdin == "null" else None,
                              capture_output=True, timeout=120, check=False)
        assert b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
        if limit > 4 and done.returncode == 0:
            return  # enough for this run here: nobody's other processes vary
        assert done.returncode == 125, (done.returncode, done.stderr)
        assert b"ulimit -u" in done.stderr, done.stderr  # the cause, not a chroot or a user namespace
        # Refused once the command had started: it is killed at once and the run says it may have run.
        assert not marker.exists() or b"may have run in part" in done.stderr, done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
