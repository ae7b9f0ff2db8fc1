"""``run`` with a profile whose allowlist carries ``[[network.secrets]]``:
what is refused before anything runs (exit 2 for the input, 125 for a runner
that cannot keep the value out of the sandbox)."""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.sandboxed import LANDLOCK_DEGRADED, need_runner

VALUE = "ghp_the-real-value-0123456789"


def secret_profile(directory: Path, extra: str = "") -> Path:
    path = directory / "secret.toml"
    path.write_text(f'extends = "workspace-write"\n{extra}[network]\nmode = "allowlist"\n'
                    'allow = ["api.example.test"]\n'
                    '[[network.secrets]]\nenv = "DSH_TEST_TOKEN"\nhosts = ["api.example.test"]\n')
    return path


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DSH_TEST_TOKEN"}
    return {**env, **extra}


def test_a_secret_unset_on_the_host_is_refused_and_nothing_runs(workspace: Path, trusted_dir: Path) -> None:
    done = cli("run", "--profile", str(secret_profile(trusted_dir)), "--", "touch", "ran", cwd=workspace,
               env=env_with())
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "DSH_TEST_TOKEN is not set in dsh-sandbox's environment" in err and "Traceback" not in err
    assert not (workspace / "ran").exists()


def test_a_runner_that_cannot_hold_secrets_refuses_and_runs_nothing(workspace: Path, trusted_dir: Path) -> None:
    need_runner("gvisor")  # it holds an allowlist as root, not its secrets
    done = cli("run", "--runner", "gvisor", "--profile", str(secret_profile(trusted_dir)), "--",
               "touch", "ran", cwd=workspace, env=env_with(DSH_TEST_TOKEN=VALUE))
    err = done.stderr.decode()
    assert done.returncode == 125, err
    assert "cannot keep secrets out of the sandbox (bwrap, docker and landlock can)" in err
    assert "--allow-domain" not in err
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("flag", ["--network", "--no-network"])
def test_dropping_the_allowlist_of_a_secret_passed_through_is_refused(workspace: Path, trusted_dir: Path,
                                                                      flag: str) -> None:
    profile = secret_profile(trusted_dir, 'env_passthrough = ["DSH_TEST_TOKEN"]\n')
    done = cli("run", "--profile", str(profile), flag, "--", "touch", "ran", cwd=workspace,
               env=env_with(DSH_TEST_TOKEN=VALUE))
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert f"{flag} replaces the allowlist" in err and "would get the real value" in err
    assert not (workspace / "ran").exists()


@pytest.mark.parametrize("runner", ["bwrap", "docker", "landlock"])
def test_the_command_gets_the_placeholder_and_the_session_ca(workspace: Path, trusted_dir: Path,
                                                             runner: str) -> None:
    need_runner(runner)
    profile = secret_profile(trusted_dir, 'env_passthrough = ["DSH_TEST_TOKEN"]\n')
    script = 'printf "%s\\n" "$DSH_TEST_TOKEN" "$SSL_CERT_FILE"; cat "$SSL_CERT_FILE" /proc/self/environ'
    accept = [flag for name in (*LANDLOCK_DEGRADED, "landlock-network-by-port") for flag in ("--accept-degraded", name)]
    done = cli("run", "--runner", runner, *(accept if runner == "landlock" else ()), "--profile", str(profile), "--",
               "sh", "-c", script, cwd=workspace, env=env_with(DSH_TEST_TOKEN=VALUE))
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, done.stderr
    placeholder, bundle = out.splitlines()[:2]
    assert placeholder.startswith("dsh-secret-")
    # Landlock has no mount namespace: the bundle is the host's file, outside every writable root.
    assert (bundle.startswith("/var/tmp/dsh-sandbox-ca-") and bundle.endswith("/ca-bundle.pem")
            if runner == "landlock" else bundle == "/dev/dsh-sandbox/ca-bundle.pem")
    assert "-----BEGIN CERTIFICATE-----" in out
    assert VALUE not in out and VALUE not in done.stderr.decode(errors="replace")


def test_auto_skips_the_runners_that_cannot_hold_secrets(workspace: Path, trusted_dir: Path) -> None:
    need_runner("bwrap")
    done = cli("run", "--json", "--profile", str(secret_profile(trusted_dir)), "--", "sh", "-c",
               'echo "$DSH_TEST_TOKEN"', cwd=workspace, env=env_with(DSH_TEST_TOKEN=VALUE))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["sandbox"]["runner"] in ("bwrap", "docker")
    assert data["stdout"]["text"].startswith("dsh-secret-") and VALUE not in done.stdout.decode()


def test_a_placeholder_sent_to_another_allowed_host_is_refused_with_what_to_fix(workspace: Path,
                                                                                trusted_dir: Path) -> None:
    # The host is allowed: the note must not stop at "allow the host", which would not help.
    need_runner("bwrap")
    hits: list[str] = []

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    profile = trusted_dir / "secret-and-loopback.toml"
    profile.write_text('extends = "workspace-write"\nenv_passthrough = ["DSH_TEST_TOKEN"]\n[network]\n'
                       'mode = "allowlist"\nallow = ["api.example.test", "127.0.0.1"]\n'
                       'allow_private_for = ["127.0.0.1"]\n'
                       '[[network.secrets]]\nenv = "DSH_TEST_TOKEN"\nhosts = ["api.example.test"]\n')
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    script = f'curl -sS -o /dev/null {url}/plain && curl -sS -H "X-Other: $DSH_TEST_TOKEN" {url}/carried; exit 7'
    try:
        done = cli("run", "--runner", "bwrap", "--profile", str(profile), "--", "sh", "-c", script, cwd=workspace,
                   env=env_with(DSH_TEST_TOKEN=VALUE))
    finally:
        httpd.shutdown()
        httpd.server_close()
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 7, err
    assert hits == ["/plain"]  # the host itself is allowed; only the request with the placeholder is refused
    assert "the network allowlist refused 127.0.0.1 (" in err, err
    assert ("a request that carries a secret's placeholder is refused unless it goes to a host of its "
            "[[network.secrets]] entry, in its header, over HTTPS") in err
    assert VALUE not in err
