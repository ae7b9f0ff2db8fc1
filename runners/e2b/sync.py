"""Keeping the sandbox's copy of the workspace and the host's in step.

- ``push`` (before every command, and once at setup): if the host workspace
  changed since the last sync (its manifest differs), the changed entries go to
  the sandbox as ONE tar through the files API, entries gone from the host are
  removed there, and root extracts it, then gives the tree to ``<user>`` with
  ``go-w`` so ``<user>-ro`` can read but never write it.  Hidden paths are
  never sent.
- ``pull`` (after each workspace-write or danger-full-access command, however
  it ended, while the sandbox lives): root tars the workspace
  (``--hard-dereference``: hardlinked files come back as copies), the host
  downloads the one archive and applies it through ``archive`` (validated as a
  whole; protected paths never written; deletions of files the host did not
  touch since the last sync propagate).

Pushes and pulls are serialised.  The runner's scripts run with cwd ``/`` and
paths written relative to it: inside a sandbox that is the absolute path, and it
lets them run unchanged against the offline envd double, which maps the
sandbox filesystem into a directory.
"""

from __future__ import annotations

import os
import secrets
import shlex
import tempfile
import threading
from pathlib import Path
from typing import IO, Protocol

from dsh.runners.e2b import archive
from dsh.runners.e2b.manifest import Entry, changes, entry_of, open_dirs, open_workspace, pack, take_manifest
from dsh.runners.e2b.options import E2BOptions
from dsh.sandbox.policy import SandboxPolicy

# Scratch for archives in the sandbox, inside root's home (0700): the files API
# creates it on the first upload.
_SCRATCH = "/root/.dsh-e2b"


def rel(path: Path | str) -> str:
    """A sandbox path written relative to ``/``, shell-quoted."""
    return shlex.quote(str(path).lstrip("/") or ".")


class SandboxFiles(Protocol):
    """What the sync needs of its session: file transfer and the runner's own scripts."""

    options: E2BOptions

    def upload(self, path: str, data: IO[bytes] | bytes, timeout: float) -> None: ...

    def download(self, path: str, out: IO[bytes], timeout: float) -> None: ...

    def run_internal(self, script: str, *, what: str, user: str = ..., timeout: float = ...,
                     check: bool = ...) -> str: ...


class WorkspaceSync:
    def __init__(self, session: SandboxFiles, policy: SandboxPolicy, root_fd: int | None = None) -> None:
        self.session = session
        self.workspace = policy.workspace
        #: The workspace as the policy service pinned it (the runner owns the
        #: fd): every read for upload and every write back goes through it.
        self.root_fd = root_fd
        self.hidden = policy.hidden_paths
        self.manifest: dict[str, Entry] = {}  # the host state the sandbox's copy matches
        self.digests: dict[str, str] = {}  # content digests of the sandbox's files
        self.reported_links: set[str] = set()  # symlinks already named as left in the sandbox
        self.pushed = False
        self.lock = threading.Lock()

    def push(self, timeout: float) -> None:
        """Make the sandbox's workspace match the host; a no-op when nothing changed."""
        with self.lock:
            current = take_manifest(self.workspace, exclude=self.hidden, root_fd=self.root_fd)
            send, remove = changes(self.manifest, current)
            if self.pushed and not send and not remove:
                return
            token = secrets.token_hex(8)
            upload, rm_list = f"{_SCRATCH}/in-{token}.tar", f"{_SCRATCH}/rm-{token}"
            ws = str(self.workspace).lstrip("/")
            with tempfile.TemporaryFile() as tar:
                sent = pack(self.workspace, send, tar, root_fd=self.root_fd)
                tar.seek(0)
                self.session.upload(upload, tar, timeout)
            if remove:
                names = b"".join(f"{ws}/{name}".encode("utf-8", "surrogateescape") + b"\0"
                                 for name in remove)
                self.session.upload(rm_list, names, timeout)
            owner = f"{self.session.options.user}:{self.session.options.user}"
            self.session.run_internal(
                "set -eu\n"
                # The first push starts from an empty copy (a debug envd may be reused).
                + ("" if self.pushed else f"rm -rf {rel(ws)}\n")
                + f"mkdir -p {rel(ws)}\n"
                + (f"xargs -0 rm -rf -- < {rel(rm_list)}\n" if remove else "")
                + f"tar -xf {rel(upload)} -C {rel(ws)} --no-same-owner\n"
                f"rm -f {rel(upload)} {rel(rm_list)}\n"
                f"chown -R -h {owner} {rel(ws)}\n"
                f"chmod -R u+rwX,go+rX,go-w {rel(ws)}\n",
                what="syncing the workspace into the sandbox", timeout=timeout)
            if not self.pushed:
                self.digests.clear()
            for name in remove:
                self.digests.pop(name, None)
            self.digests.update(sent)
            self.manifest = current
            self.pushed = True

    def pull(self, policy: SandboxPolicy) -> list[str]:
        """Bring the workspace back; return notes for stderr.

        Raises ``archive.SyncBackRefused`` (nothing written; the sandbox's copy is
        rebuilt from the host at the next push) or ``SandboxUnavailable``.
        """
        timeout = self.session.options.sync_timeout
        remote = f"{_SCRATCH}/out-{secrets.token_hex(8)}.tar"
        with self.lock, tempfile.TemporaryFile() as local:
            self.session.run_internal(
                f"umask 077; mkdir -p {rel(_SCRATCH)} || exit 2\n"
                f"tar -cf {rel(remote)} --hard-dereference -C {rel(self.workspace)} .; rc=$?\n"
                "[ $rc -le 1 ]  # 1: a file changed while being read\n",
                what="archiving the workspace for sync-back", timeout=timeout)
            try:
                self.session.download(remote, local, timeout)
            finally:
                self.session.run_internal(f"rm -f {rel(remote)}", what="removing the archive",
                                          check=False)
            local.seek(0)
            protected = (*policy.protected_paths, *policy.read_only_paths, *policy.hidden_paths)
            try:
                plan = archive.plan_sync_back(local, self.workspace, protected, self.manifest,
                                              self.digests, git_commit=policy.git == "commit")
                archive.apply_sync_back(local, self.workspace, plan, root_fd=self.root_fd)
            except archive.SyncBackRefused:
                # Nothing was written.  The sandbox's copy now holds what the host
                # refused (a symlink, say); rebuild it from the host before the
                # next command, or every later sync-back would be refused too.
                self.manifest, self.pushed = {}, False
                raise
            self._record(plan)
        notes = [f"dsh: e2b: not synced back (protected path stays read-only): {p}"
                 for p in plan.skipped_protected]
        # Once per link: a venv's links would otherwise be repeated after every command.
        new_links = [link for link in plan.skipped_links if link not in self.reported_links]
        self.reported_links.update(new_links)
        return notes + [f"dsh: e2b: not synced back (a symlink stays in the sandbox): {link}"
                        for link in new_links]

    def _record(self, plan: archive.SyncPlan) -> None:
        """After a pull: the manifest says which host state the sandbox's copy
        matches, so the next push sends exactly what differs."""
        for parts in plan.deletions:
            self.manifest.pop("/".join(parts), None)
            self.digests.pop("/".join(parts), None)
        for update in plan.updates:
            rel_path = "/".join(update.parts)
            host = self.workspace.joinpath(*update.parts)
            top = open_workspace(self.workspace, self.root_fd)
            try:
                parent = open_dirs(top, update.parts[:-1])
            except OSError:
                continue  # moved since: the next manifest will notice
            finally:
                os.close(top)
            try:
                entry = entry_of(os.stat(update.parts[-1], dir_fd=parent, follow_symlinks=False), host)
            except OSError:
                continue
            finally:
                os.close(parent)
            if entry is not None:
                self.manifest[rel_path] = entry
        self.digests.update(plan.digests)
        for skipped in plan.skipped_protected:
            # The sandbox differs there now: the next push restores the host's copy.
            self.manifest.pop(skipped, None)
