"""One mount plan for every runner: bwrap's and gVisor's translations are fed
the same core plan and must mount exactly it, in its order; docker's container
spec translates the same plan into binds inside what a container shows.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
def test_docker_mounts_exactly_the_one_plan_inside_what_it_shows(tmp_path: Path, layout: str) -> None:
    """The same plan fed to docker's translation: a container has no host
    underneath, so every writable, pinned and shown entry is a bind, and every
    read-only path, placeholder and mask is mounted exactly where it lies
    inside what the container shows; what lies outside is not in the
    container at all, so it is left out.  ``/tmp`` is the container's own
    tmpfs; the only mounts of docker's own are that, its control directory and
    the user's git config."""
    from dsh.runners.docker.mounts import CONTROL_DIR, translate

    base = Path(os.path.realpath(tmp_path))
    policy = _layouts(base)[layout]()
    facts = gather_facts(policy, os.geteuid())
    plan = plan_mounts(policy, facts)
    mounts = {m.target: m for m in translate(policy, plan, facts)}
    tops = [str(policy.workspace), *(str(r) for r in policy.writable_roots),
            *([str(policy.home)] if policy.home else []), *facts.enclosing]
    if plan.of_kind("private-tmp"):
        tops.append("/tmp")
    expected = {}
    for e in plan.entries:
        inside = any(e.path == t or e.path.startswith(t + "/") for t in tops)
        if e.path == "/tmp" or (e.kind not in ("writable", "pin", "show") and not inside):
            continue
        expected[e.path] = e.kind
    assert set(mounts) - set(expected) <= {CONTROL_DIR, "/tmp", os.path.expanduser("~/.gitconfig")}
    for path, kind in expected.items():
        m = mounts[path]
        if kind in ("writable", "pin"):
            assert (m.kind, m.read_only, m.source) == ("bind", False, path), m
        elif kind in ("read-only", "placeholder", "show"):
            assert (m.kind, m.read_only, m.source) == ("bind", True, path), m
        elif kind == "mask-dir":
            assert (m.kind, m.read_only) == ("tmpfs", True), m
        else:
            assert (m.kind, m.read_only, m.source) == ("bind", True, os.devnull), m
    assert mounts["/tmp"].kind == "tmpfs" and mounts["/tmp"].read_only == (policy.mode is SandboxMode.READ_ONLY)
    # Nothing is dropped that the command could otherwise reach: each left
    # out entry lies outside every bind the container has.
    binds = [m.target for m in mounts.values() if m.kind == "bind" and m.source == m.target]
    for e in plan.entries:
        if e.path not in mounts and e.path != "/tmp":
            assert not any(e.path.startswith(b + "/") for b in binds), e


def test_docker_leaves_out_what_a_mask_over_a_mostly_hidden_directory_shows_again() -> None:
    """A mask over a directory whose entries are mostly hidden binds the rest
    again read-only on runners with the host underneath; a container must not
    get those host paths at all."""
    from dsh.runners.docker.mounts import translate

    # Outside /tmp: the plan never puts such a mask beneath it.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as made:
        _leaves_out_the_shown_again(Path(os.path.realpath(made)), translate)


def _leaves_out_the_shown_again(base: Path, translate: Callable[..., tuple[Any, ...]]) -> None:
    ws, homes = base / "ws", base / "homes"
    ws.mkdir()
    for name in ("a", "b", "c", "d", "visible"):
        (homes / name).mkdir(parents=True)
    policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws,),
                           hidden_paths=tuple(homes / n for n in "abcd"))
    facts = gather_facts(policy, os.geteuid())
    plan = plan_mounts(policy, facts)
    assert ("read-only", str(homes / "visible")) in [(e.kind, e.path) for e in plan.entries]
    targets = {m.target for m in translate(policy, plan, facts)}
    assert not any(t == str(homes) or t.startswith(str(homes) + "/") for t in targets), targets
