"""A placeholder a session is about to bind is never removed by another
session's cleanup, and the daemon's refusal gets our own message.

After a crash, one session's reaper removed the placeholders of dead
containers while another session had just found one (``FileExistsError``) and
was creating its container: the daemon refused with its raw ``400 Client
Error ... bind source path does not exist``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.runners.docker import client as dc
from dsh.runners.docker.spec import ContainerSpec, create_error

from tests.runners.docker.helpers import docker_runner


def test_a_placeholder_held_by_a_session_survives_a_cleanup(workspace: Path) -> None:
    with docker_runner() as runner:
        client = runner._docker()
        placeholder = workspace / ".dsh"
        placeholder.mkdir()
        held = dc.hold_placeholder(str(placeholder))
        assert held is not None
        try:
            assert dc.remove_placeholders(client, [str(placeholder)]) == []
            assert placeholder.is_dir(), "removed while a session was about to bind it"
        finally:
            os.close(held)
        assert dc.remove_placeholders(client, [str(placeholder)]) == [str(placeholder)]
        assert not placeholder.exists()


def test_a_vanished_bind_source_is_our_message() -> None:
    raw = Exception('400 Client Error for http+docker://localhost/v1.47/containers/create: Bad Request '
                    '("invalid mount config for type "bind": bind source path does not exist: /w/ws/.dsh")')
    message = create_error(ContainerSpec.__new__(ContainerSpec), raw)
    assert "/w/ws/.dsh" in message and "retry" in message and "400" not in message


def test_a_placeholder_is_made_with_the_mode_the_next_plan_adopts(workspace: Path) -> None:
    """Made 0755, a placeholder left behind was taken by the next plan for a
    protected directory of the user's: bound by its name under the workspace,
    a source a swapped workspace makes vanish in the middle of runc's mounts."""
    from dsh.runners.docker.verify import make_placeholder
    from dsh.sandbox.mount_facts import PLACEHOLDER_MODE, is_placeholder

    old = os.umask(0o077)
    try:
        make_placeholder(str(workspace / ".dsh"), None)
    finally:
        os.umask(old)
    assert (workspace / ".dsh").stat().st_mode & 0o7777 == PLACEHOLDER_MODE
    assert is_placeholder(str(workspace / ".dsh"))


def test_the_empty_source_of_placeholders_is_checked_before_it_is_bound(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from dsh.runners.docker.placeholder_source import MODE, NAME, empty_source
    from dsh.sandbox.errors import SandboxUnavailable

    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    path = Path(empty_source())
    assert runtime in path.parents, path  # this test's own, not the user's
    assert path.name == NAME and path.stat().st_mode & 0o7777 == MODE and not os.listdir(path)
    assert empty_source() == str(path), "made once, then found"
    path.chmod(0o755)  # a run that may chmod what the user owns (an accepted degradation)
    assert empty_source() == str(path) and path.stat().st_mode & 0o7777 == MODE, "its mode set back"
    path.chmod(0o755)
    (path / "planted").touch()
    with pytest.raises(SandboxUnavailable, match=f"must be an empty directory.*rm -rf {path}"):
        empty_source()
    (path / "planted").unlink()
    path.rmdir()
    path.symlink_to(tmp_path)
    with pytest.raises(SandboxUnavailable, match="is not the directory the runner made"):
        empty_source()
