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
