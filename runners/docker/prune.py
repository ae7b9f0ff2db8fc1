"""Remove leftover containers of executors that died without closing their runner.

Called by ``dsh-sandbox runners --prune``.  A container is a leftover when its
owner process (labels: pid, start time, host name) is gone; containers owned
by another machine are only removed with ``all=True``.
"""

from __future__ import annotations

import socket

from dsh.runners.docker import client as dc


def prune_containers(all: bool = False) -> list[str]:
    """Remove dsh-sandbox containers whose owner is dead (every one with ``all``).

    Returns the names removed.  Raises ``SandboxUnavailable`` when the daemon
    cannot be reached.
    """
    client = dc.connect()
    try:
        removed: list[str] = []
        placeholders: list[str] = []
        for info in client.api.containers(all=True, filters={"label": dc.LABEL}):
            labels = info.get("Labels") or {}
            if not all and dc.owner_alive(labels):
                continue
            if dc.remove_container(client, info["Id"]):
                removed.append(str((info.get("Names") or [info["Id"]])[0]).lstrip("/"))
                if labels.get(dc.LABEL_OWNER_HOST) == socket.gethostname():
                    placeholders += dc.placeholders_of(labels)
        dc.remove_placeholders(client, placeholders)
        return removed
    finally:
        client.close()
