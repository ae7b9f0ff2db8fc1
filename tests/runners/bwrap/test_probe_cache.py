"""A trial sandbox that worked is remembered between processes, under a key
of everything its outcome depends on; a failure never is, and a file
another uid could have written is never believed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dsh.runners.bwrap import host_facts, probe_cache
from dsh.runners.bwrap.host_facts import probe_host
from dsh.sandbox.host_tools import system_tool

from tests.support.require import require_runner


@pytest.fixture
def cache(trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require_runner("bwrap")
    monkeypatch.setenv("XDG_CACHE_HOME", str(trusted_dir / "cache"))
    return trusted_dir / "cache" / "dsh-sandbox" / "probes"


def _trials(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record each trial sandbox started (and still start it)."""
    started: list[list[str]] = []
    real = host_facts._run_with

    def counted(argv: list[str], *fds: int) -> subprocess.CompletedProcess[str]:
        started.append(argv)
        return real(argv, *fds)

    monkeypatch.setattr(host_facts, "_run_with", counted)
    return started


def test_a_trial_that_worked_is_not_run_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _trials(monkeypatch)
    first = probe_host(None, None)
    assert first.works and len(trials) == 1
    (entry,) = cache.iterdir()
    assert entry.stat().st_mode & 0o077 == 0 and entry.stat().st_uid == os.geteuid()
    again = probe_host(None, None)
    assert again.works and len(trials) == 1, "the remembered trial ran again"
    assert again.version == first.version
    # Measured alone, the trial always runs.
    assert probe_host(None, None, remembered=False).works and len(trials) == 2


def test_another_bwrap_binary_is_tried_anew(cache: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _trials(monkeypatch)
    assert probe_host(None, None).works
    bwrap = system_tool("bwrap")
    assert bwrap is not None
    copy = trusted_dir / "bin" / "bwrap"
    copy.parent.mkdir()
    shutil.copy2(bwrap, copy)
    assert probe_host(str(copy), None).works and len(trials) == 2
    # The same path with other contents (an upgrade): tried anew too.
    copy.write_bytes(Path(bwrap).read_bytes() + b"\0")
    copy.chmod(0o755)
    assert probe_host(str(copy), None).works and len(trials) == 3


def test_a_failed_trial_is_not_remembered(cache: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = _trials(monkeypatch)
    broken = trusted_dir / "bin" / "bwrap"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    broken.chmod(0o755)
    for expected in (1, 2):
        facts = probe_host(str(broken), None)
        assert not facts.works and "uid map" in (facts.reason or "")
        assert len(trials) == expected
    assert not cache.exists() or list(cache.iterdir()) == []


@pytest.mark.parametrize("forgery", ["writable by others", "another key", "too old", "huge", "escapes"])
def test_an_entry_that_cannot_be_believed_is_ignored(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                      forgery: str) -> None:
    trials = _trials(monkeypatch)
    assert probe_host(None, None).works
    (entry,) = cache.iterdir()
    if forgery == "writable by others":
        entry.chmod(0o666)
    elif forgery == "another key":
        entry.write_text(entry.read_text().replace('"key": "', '"key": "0'))
    elif forgery == "huge":
        # Still valid JSON (trailing blanks), but more than an entry can be: never read.
        entry.write_text(entry.read_text() + " " * 8192)
    else:
        kept = json.loads(entry.read_text())
        if forgery == "too old":
            kept["at"] = time.time() - probe_cache.MAX_AGE_S - 60
        else:
            kept["version"] = "bubblewrap\x1b]52;c;cHduZWQ=\x07\x1b[2J"
        entry.write_text(json.dumps(kept))
    assert probe_host(None, None).works and len(trials) == 2


def test_a_sandbox_bwrap_could_not_set_up_forgets_what_was_remembered(cache: Path) -> None:
    assert probe_host(None, None).works
    assert list(cache.iterdir())
    probe_cache.forget_all()
    assert list(cache.iterdir()) == []


def test_a_key_follows_what_the_trial_depends_on(cache: Path) -> None:
    """Credentials, namespaces and the root directory are part of the key: a
    child in a new user namespace (as an unprivileged user would be in a
    container) computes another one."""
    argv, programs = ["bwrap", "true"], ["/bin/true"]
    here = probe_cache.trial_key(argv, programs, None)
    assert here == probe_cache.trial_key(argv, programs, None)
    assert here != probe_cache.trial_key([*argv, "--unshare-net"], programs, None)
    unshare = system_tool("unshare")
    assert unshare is not None  # the bwrap runner needs it: the fixture's probe checked
    code = ("import sys; from dsh.runners.bwrap import probe_cache; "
            "print(probe_cache.trial_key(['bwrap', 'true'], ['/bin/true'], None))")
    inside = subprocess.run([unshare, "--user", "--map-root-user", sys.executable, "-P", "-c", code],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert len(inside) == 64 and inside != here
