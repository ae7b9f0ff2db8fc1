"""Remembering denied runs, so a later request to run the same command wider
is judged as the re-run it is.

A rule matches a command by its words (``argv = ["bash", "build.sh"]``), so
the memory is keyed by words too: ``bash  build.sh`` (two spaces) is the same
run.  A command that is not a simple command (operators, expansions...) is
keyed by its exact string: no rule matches it by words.

The CLI's ``tool call`` is a session of its own per call, so what call 1's
denied run changed would be forgotten by call 2 (the model asks to escalate
the command it just ran).  ``DeniedRunStore`` keeps those records in a small
file beside the escalation log: bounded, 0600, never opened through a link,
entries expiring after ``EXPIRY_S``.  A store that cannot be read answers
"not known", which no rule approves.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from dsh.sandbox.command_words import simple_argv
from dsh.sandbox.errors import DshError
from dsh.sandbox.file_changes import FileChanges
from dsh.sandbox.input_files import open_private_file
from dsh.sandbox.own_dirs import open_own_dir

#: Records kept in the file (the latest ones; a model re-asks soon).
KEPT = 64
#: A record older than this is forgotten: the re-run it warns of is long past.
EXPIRY_S = 6 * 3600
#: The file never grows past this (records are small; more is not ours).
MAX_BYTES = 1024 * 1024


def run_key(command: str) -> str:
    """The key a denied run of ``command`` is remembered by: its words when
    bash would run one program with them, else the exact string."""
    words = simple_argv(command)
    key: list[str] = ["argv", *words] if words is not None else ["command", command]
    return json.dumps(key, ensure_ascii=True)


def _changes_record(changes: FileChanges) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(changes).items()}


def _changes_from(raw: Any) -> FileChanges:
    """A record's changes; anything malformed reads as "not known"."""
    try:
        lists = {k: tuple(str(p) for p in raw[k]) for k in ("created", "modified", "deleted", "incomplete")}
        return FileChanges(total=int(raw["total"]), **lists)
    except (KeyError, TypeError, ValueError):
        return FileChanges.unknown("the record of the denied run is damaged")


class DeniedRunStore:
    """Denied runs of one-shot sessions, in a JSONL file (one record a line)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, owner: str, workdir: str, key: str, changes: FileChanges) -> None:
        # Its directory is reached as the escalation log's is: never through
        # a link, created 0700 from the fd of the deepest existing part.
        own = open_own_dir(self.path.parent, "the record of denied runs", "set DSH_HOME to a directory of yours",
                           narrow=False)
        try:
            fd = open_private_file(Path(self.path.name), os.O_RDWR, dir_fd=own.fd)
        finally:
            own.close()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = time.time()
            kept = [r for r in self._records(fd, now) if (r.get("owner"), r.get("workdir"), r.get("key"))
                    != (owner, workdir, key)]
            kept.append({"time": now, "owner": owner, "workdir": workdir, "key": key,
                         "changes": _changes_record(changes)})
            data = "".join(json.dumps(r, ensure_ascii=True, sort_keys=True) + "\n" for r in kept[-KEPT:])
            os.ftruncate(fd, 0)
            os.pwrite(fd, data.encode("ascii"), 0)
        finally:
            os.close(fd)

    def get(self, owner: str, workdir: str, key: str) -> FileChanges | None:
        # Read as it is written: its directory reached never through a link (a
        # command may have planted one where DSH_HOME points), nothing created.
        try:
            own = open_own_dir(self.path.parent, "the record of denied runs", "set DSH_HOME to a directory of yours",
                               narrow=False)
        except DshError as exc:
            return FileChanges.unknown(f"the record of denied runs cannot be read: {exc}")
        try:
            fd = os.open(self.path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=own.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return FileChanges.unknown(f"the record of denied runs {self.path} cannot be read ({exc.strerror})")
        finally:
            own.close()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return FileChanges.unknown(f"the record of denied runs {self.path} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            records = self._records(fd, time.time())
        except OSError as exc:
            return FileChanges.unknown(f"the record of denied runs {self.path} cannot be read ({exc.strerror})")
        finally:
            os.close(fd)
        for record in reversed(records):
            if (record.get("owner"), record.get("workdir"), record.get("key")) == (owner, workdir, key):
                return _changes_from(record.get("changes"))
        return None

    @staticmethod
    def _records(fd: int, now: float) -> list[dict[str, Any]]:
        data = os.pread(fd, MAX_BYTES, 0)
        records: list[dict[str, Any]] = []
        for line in data.decode("ascii", "replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("time"), (int, float)):
                if 0 <= now - record["time"] < EXPIRY_S:
                    records.append(record)
        return records
