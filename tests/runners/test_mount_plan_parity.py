"""One mount plan for every runner: bwrap's and gVisor's translations are fed
the same core plan and must mount exactly it, in its order; docker's container
spec, which still plans for itself, is held to the same mounts on the same
live layouts, so a fix the core plan has and docker lacks fails here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from dsh.runners.bwrap.mounts import plan_mounts as bwrap_plan
from dsh.runners.bwrap.mounts import translate as bwrap_translate
from dsh.runners.gvisor.spec import oci_mounts
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import gather_facts, plan_mounts
from dsh.sandbox.policy import SandboxPolicy

_BWRAP_KIND = {"writable": "bind", "read-only": "ro-bind"}


def _layouts(base: Path) -> dict[str, Callable[[], SandboxPolicy]]:
    ws = base / "ws"

    def pol(**kw: object) -> SandboxPolicy:
        args: dict[str, object] = dict(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,))
        args.update(kw)
        return SandboxPolicy(**args)  # type: ignore[arg-type]

    def existing() -> SandboxPolicy:
        (ws / ".git" / "hooks").mkdir(parents=True)
        (ws / "pkg" / ".git").mkdir(parents=True)
        return pol(protected_paths=(ws / ".git", ws / "pkg" / ".git", ws / ".dsh"))

    def missing() -> SandboxPolicy:
        (ws / "a").mkdir(parents=True)
        return pol(protected_paths=(ws / "a" / "b" / ".dsh", ws / ".vscode"))

    def symlinked() -> SandboxPolicy:
        (ws / "real").mkdir(parents=True)
        os.symlink(ws / "real", ws / ".vscode")
        return pol(protected_paths=(ws / ".vscode",))

    def hidden() -> SandboxPolicy:
        (ws / "secret" / "cache").mkdir(parents=True)
        (ws / ".env").write_text("K=V\n")
        return pol(writable_roots=(ws, ws / "secret" / "cache"), protected_paths=(ws / "secret" / ".git",),
                   hidden_paths=(ws / "secret", ws / ".env", ws / "gone"))

    def nested() -> SandboxPolicy:
        (ws / "docs" / "cache").mkdir(parents=True)
        return pol(writable_roots=(ws, ws / "docs" / "cache"), read_only_paths=(ws / "docs",),
                   protected_paths=(ws / "docs" / "cache" / ".git",))

    def read_only() -> SandboxPolicy:
        (ws / ".git").mkdir(parents=True)
        return SandboxPolicy(mode=SandboxMode.READ_ONLY, workspace=ws, protected_paths=(ws / ".git",),
                             hidden_paths=(ws / ".git",))

    def private_tmp() -> SandboxPolicy:
        (ws / ".git").mkdir(parents=True)
        (base / "ptmp").mkdir()
        return pol(writable_roots=(ws, base / "ptmp"), private_tmp=base / "ptmp",
                   protected_paths=(ws / ".git", ws / ".dsh", base / "ptmp" / ".dsh"))

    def private_tmp_repo() -> SandboxPolicy:
        # A workspace inside a checkout: under a private /tmp the checkout is
        # bound again, read-only, wherever it lies beneath /tmp.
        repo = base / "checkout"
        (repo / ".git").mkdir(parents=True)
        inner = repo / "pkg"
        inner.mkdir()
        (base / "ptmp").mkdir()
        return SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=inner,
                             writable_roots=(inner, base / "ptmp"), private_tmp=base / "ptmp",
                             protected_paths=(inner / ".git", repo / ".git"))

    return {f.__name__: f for f in (existing, missing, symlinked, hidden, nested, read_only, private_tmp,
                                     private_tmp_repo)}


LAYOUTS = ["existing", "missing", "symlinked", "hidden", "nested", "read_only", "private_tmp", "private_tmp_repo"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bwrap_and_gvisor_mount_exactly_the_one_plan(tmp_path: Path, layout: str) -> None:
    """One plan fed to both translators: the same paths, in the same order,
    writable where the plan says so, the same gaps under each runner's name."""
    base = Path(os.path.realpath(tmp_path))
    policy = _layouts(base)[layout]()
    plan = plan_mounts(policy, gather_facts(policy, os.geteuid()))
    if layout.startswith("private_tmp"):
        assert plan.of_kind("private-tmp"), "the layout must exercise it"
    expected = [(e.path, e.kind in ("writable", "pin", "private-tmp")) for e in plan.entries if e.kind != "show"]
    bwrap = bwrap_translate(plan)
    assert [(m.path, m.writable or m.kind == "private-tmp") for m in bwrap.mounts] == expected
    assert [(m.source or m.path) for m in bwrap.mounts] == [e.source or e.path for e in plan.entries
                                                             if e.kind != "show"]
    gvisor = oci_mounts(plan)
    assert [(m["destination"], "rw" in m.get("options", [])) for m in gvisor] == expected
    assert [g.reason for g in bwrap.degradations] == [g.reason for g in plan.gaps_for("gvisor")]
    assert {g.degradation for g in bwrap.degradations} == ({"bwrap-protected-symlink"} if layout == "symlinked"
                                                           else set())
    # What the runner plans for itself is that translation of the live filesystem.
    assert bwrap_plan(policy) == bwrap


@pytest.mark.parametrize("layout", LAYOUTS)
def test_gvisor_mounts_exactly_the_core_plan(tmp_path: Path, layout: str) -> None:
    base = Path(os.path.realpath(tmp_path))
    policy = _layouts(base)[layout]()
    plan = plan_mounts(policy, gather_facts(policy, os.geteuid()))
    mounts = oci_mounts(plan)
    expected = [(e.path, e.kind in ("writable", "pin", "private-tmp")) for e in plan.entries if e.kind != "show"]
    assert [(m["destination"], "rw" in m.get("options", [])) for m in mounts] == expected
    for entry, mount in zip([e for e in plan.entries if e.kind != "show"], mounts, strict=True):
        if entry.kind == "mask-dir":
            assert mount["type"] == "tmpfs" and "ro" in mount["options"]
        elif entry.kind == "mask-file":
            assert mount["source"] == os.devnull and "ro" in mount["options"]
        else:
            assert mount["type"] == "bind" and mount["source"] == (entry.source or entry.path)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_core_plan_mounts_what_docker_binds(tmp_path: Path, layout: str) -> None:
    """Docker shows only what it binds: every writable, read-only and hidden
    entry of the core plan is a bind or mask of the container, and nothing
    read-only beyond the plan's ``show`` entries.  Two differences are its own
    and deliberate: a protected path behind a symlink is bound at the link's
    path (the daemon resolves it inside the container), and ``/tmp`` is the
    container's own tmpfs (read-only in read-only mode; the session's private
    directory is bound at its own path, ``$TMPDIR``), not a ``private-tmp`` bind.
    The masks of dsh-sandbox's state directories are for runners that put the
    host underneath: a container never mounts them."""
    from dsh.runners.docker.spec import build_spec

    base = Path(os.path.realpath(tmp_path))
    policy = _layouts(base)[layout]()
    facts = gather_facts(policy, os.geteuid())
    plan = plan_mounts(policy, facts)
    state = set(facts.state_parents)
    assert not any(e.path in state for e in plan.entries if not e.kind.startswith("mask")), plan.entries
    spec = build_spec(policy, image="img", user="0:0", pids=None, memory=None, machine="x86_64")
    binds = {(m.target, m.read_only) for m in spec.mounts if m.kind == "bind" and m.source != os.devnull}
    masks = {m.target for m in spec.mounts if (m.kind == "tmpfs" and m.read_only) or m.source == os.devnull}
    linked = {os.path.realpath(t): t for t, ro in binds if ro and os.path.realpath(t) != t}
    for e in plan.entries:
        if e.kind in ("writable", "pin"):
            assert (e.path, False) in binds, e
        elif e.kind in ("read-only", "placeholder", "show"):
            assert (e.path, True) in binds or e.path in linked, e
        elif e.kind in ("mask-dir", "mask-file") and e.path not in state:
            assert e.path in masks, e
    core_ro = {e.path for e in plan.entries if e.kind in ("read-only", "placeholder", "show")}
    assert {t for t, ro in binds if ro} - core_ro - set(linked.values()) == set()
    assert masks - {e.path for e in plan.entries if e.kind.startswith("mask")} <= {"/tmp"}
