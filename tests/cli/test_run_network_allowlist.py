"""``dsh-sandbox run`` with the network limited to named hosts, end to end.

A real bwrap sandbox, the real proxy and curl, against an HTTP server on the
host's loopback (the allowlist names it, with private addresses allowed for
it: nothing else on this machine is reachable).  The allowed host answers
through the proxy variables; a host not listed, a host denied by a flag and a
direct connection that skips the proxy all fail, the server sees none of them,
and the refused hosts are reported.  ``auto`` picks bwrap for such a run; a
runner that cannot limit the network by name refuses it and nothing runs."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.support.cli import cli
from tests.support.require import unavailable
from tests.support.sandboxed import need_runner


class Counting(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Counting.hits.append(self.path)
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    Counting.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def profile(trusted_dir: Path) -> Path:
    path = trusted_dir / "loopback-allowlist.toml"
    path.write_text('extends = "workspace-write"\n[network]\nmode = "allowlist"\nallow = ["127.0.0.1"]\n'
                    'allow_private_for = ["127.0.0.1"]\n')
    return path


def curl() -> str:
    found = shutil.which("curl")
    if found is None:
        unavailable("curl", "not installed (tests/run.sh installs it)")
    return found


def run_json(workspace: Path, *args: str) -> tuple[int, dict[str, object], str]:
    done = cli("run", "--json", *args, cwd=workspace)
    return done.returncode, json.loads(done.stdout), done.stderr.decode()


def test_only_the_allowed_host_is_reached_through_the_proxy(workspace: Path, server: int, profile: Path) -> None:
    need_runner("bwrap")
    code, data, _ = run_json(workspace, "--profile", str(profile), "--", curl(), "-sS",
                             f"http://127.0.0.1:{server}/allowed")
    sandbox = data["sandbox"]
    assert isinstance(sandbox, dict)
    assert code == 0, data
    assert data["stdout"] == {**data["stdout"], "text": "hello from the host\n"}  # type: ignore[dict-item]
    assert sandbox["runner"] == "bwrap" and sandbox["network_denied"] == []  # auto chose bwrap
    assert Counting.hits == ["/allowed"]


def test_hosts_not_allowed_are_refused_and_reported(workspace: Path, server: int, profile: Path) -> None:
    need_runner("bwrap")
    script = (f"{curl()} -fsS http://127.0.0.2:{server}/other; "
              f"{curl()} -sS --noproxy '*' --max-time 5 http://127.0.0.1:{server}/direct; "
              "exit 7")
    done = cli("run", "--runner", "bwrap", "--profile", str(profile), "--", "sh", "-c", script, cwd=workspace)
    assert done.returncode == 7
    err = done.stderr.decode()
    assert "error: 403" in err or "returned error: 403" in err, err
    assert "dsh-sandbox: the network allowlist refused 127.0.0.2 (allow a host with --allow-domain HOST" in err
    assert Counting.hits == []  # neither the unlisted address nor the direct connection got through


def test_a_deny_flag_narrows_the_profiles_allowlist(workspace: Path, server: int, profile: Path) -> None:
    need_runner("bwrap")
    code, data, _ = run_json(workspace, "--profile", str(profile), "--deny-domain", "127.0.0.1", "--", curl(),
                             "-fsS", f"http://127.0.0.1:{server}/denied")
    assert code != 0
    assert data["sandbox"]["network_denied"] == ["127.0.0.1"]  # type: ignore[index]
    assert Counting.hits == []


def test_landlock_limits_by_port_only_and_runs_nothing_unless_that_is_accepted(workspace: Path) -> None:
    need_runner("landlock")
    done = cli("run", "--runner", "landlock", "--allow-domain", "pkgs.example.org", "--accept-degraded",
               "landlock-protected-paths", "--accept-degraded", "landlock-process-list", "--", "touch", "ran",
               cwd=workspace)
    assert done.returncode == 125
    err = done.stderr.decode()
    assert "landlock-network-by-port" in err and "never by address" in err, err
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize(("flags", "problem"), [
    (["--allow-domain", "https://pypi.org/simple"], "is a URL; write only its host name"),
    (["--allow-domain", "*"], "would allow every host"),
    (["--network", "--allow-domain", "pypi.org"], "--network and --allow-domain conflict"),
    (["--deny-domain", "pypi.org"], "nothing to deny from"),
])
def test_bad_host_flags_exit_2_and_run_nothing(workspace: Path, flags: list[str], problem: str) -> None:
    done = cli("run", *flags, "--", "touch", "ran", cwd=workspace)
    assert done.returncode == 2, done.stderr
    assert problem in done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    assert not (workspace / "ran").exists()


def test_an_address_named_on_the_command_line_is_reached(workspace: Path, server: int) -> None:
    need_runner("bwrap")
    done = cli("run", "--allow-domain", "127.0.0.1", "--", curl(), "-fsS", f"http://127.0.0.1:{server}/flag",
               cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello from the host\n" and Counting.hits == ["/flag"]


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def test_a_setting_for_every_run_never_widens_an_allowlist(workspace: Path, server: int, profile: Path) -> None:
    done = cli("run", "--profile", str(profile), "--", "sh", "-c",
               f"{curl()} -sS --noproxy '*' http://127.0.0.1:{server}/env; touch ran", cwd=workspace,
               env=cli_env(DSH_SANDBOX_NETWORK="1"))
    assert done.returncode == 2, done.stderr
    assert "env DSH_SANDBOX_NETWORK turns the whole network on" in done.stderr.decode()
    assert not (workspace / "ran").exists() and Counting.hits == []


def test_hosts_named_for_the_run_win_over_the_network_off_in_the_environment(workspace: Path, server: int) -> None:
    need_runner("bwrap")
    done = cli("run", "--allow-domain", "127.0.0.1", "--", curl(), "-fsS", f"http://127.0.0.1:{server}/both",
               cwd=workspace, env=cli_env(DSH_SANDBOX_NETWORK="0"))
    assert done.returncode == 0, done.stderr
    assert Counting.hits == ["/both"]


def test_danger_full_access_refuses_an_allowlist_it_could_not_apply(workspace: Path, profile: Path) -> None:
    for flags in (["--mode", "danger-full-access", "--allow-domain", "pypi.org"],
                  ["--mode", "danger-full-access", "--profile", str(profile)]):
        done = cli("run", *flags, "--", "touch", "ran", cwd=workspace)
        assert done.returncode == 2, done.stderr
        assert "danger-full-access runs the command unwrapped" in done.stderr.decode()
        assert not (workspace / "ran").exists()


def test_docker_reaches_the_allowed_host_and_reports_the_others(workspace: Path, server: int, profile: Path) -> None:
    """The same through a docker container (the proxy listens in its network namespace)."""
    need_runner("docker")
    fetch = ("import sys, urllib.error, urllib.request\n"
             "for url in sys.argv[1:]:\n"
             "    try:\n"
             "        print(urllib.request.urlopen(url, timeout=20).read().decode().strip())\n"
             "    except urllib.error.HTTPError as exc:\n"
             "        print(exc.code)\n")
    code, data, err = run_json(workspace, "--runner", "docker", "--profile", str(profile), "--", "python3", "-c",
                               fetch, f"http://127.0.0.1:{server}/allowed", f"http://127.0.0.2:{server}/other")
    sandbox = data["sandbox"]
    assert isinstance(sandbox, dict)
    assert code == 0, (data, err)
    assert data["stdout"] == {**data["stdout"], "text": "hello from the host\n403\n"}  # type: ignore[dict-item]
    assert sandbox["runner"] == "docker" and sandbox["network_denied"] == ["127.0.0.2"]
    assert Counting.hits == ["/allowed"]
