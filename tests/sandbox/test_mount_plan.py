"""The runner-neutral mount plan, on synthetic facts (no live filesystem)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.modes import SandboxMode
from dsh.sandbox.mount_plan import MountFacts, PathFact, ancestors, plan_mounts
from dsh.sandbox.policy import SandboxPolicy

WS = "/w/ws"


def facts(*, dirs: tuple[str, ...] = (), files: tuple[str, ...] = (), links: dict[str, str] | None = None,
          fixed: tuple[str, ...] = (), placeholders: tuple[str, ...] = (), enclosing: tuple[str, ...] = (),
          extra: tuple[str, ...] = ()) -> MountFacts:
    """Facts for every path named and all their ancestors; the rest is missing."""
    paths: dict[str, PathFact] = {}
    links = links or {}
    present = {*dirs, *files, *links, *placeholders, *enclosing, *links.values()}
    named = {*present, *extra}
    for p in list(named):
        named.update(ancestors(p))
    for p in named:
        real = p
        for link, target in links.items():
            if p == link or p.startswith(link + "/"):
                real = target + p[len(link):]
        if p in links:
            paths[p] = PathFact("symlink", real, p in fixed)
        elif p in placeholders:
            paths[p] = PathFact("placeholder", real)
        elif p in files:
            paths[p] = PathFact("file", real)
        elif p in dirs or any(d.startswith(p + "/") for d in present) or p in enclosing:
            paths[p] = PathFact("dir", real)
        else:
            paths[p] = PathFact("missing", real)
    return MountFacts(paths, enclosing)


def policy(mode: SandboxMode = SandboxMode.WORKSPACE_WRITE, *, roots: tuple[str, ...] = (WS,),
           protected: tuple[str, ...] = (), read_only: tuple[str, ...] = (), hidden: tuple[str, ...] = (),
           home: str | None = None) -> SandboxPolicy:
    return SandboxPolicy(mode=mode, workspace=Path(WS),
                         writable_roots=tuple(map(Path, roots)) if mode is SandboxMode.WORKSPACE_WRITE else (),
                         protected_paths=tuple(map(Path, protected)), read_only_paths=tuple(map(Path, read_only)),
                         hidden_paths=tuple(map(Path, hidden)), home=Path(home) if home else None)


def kinds(plan: object) -> list[tuple[str, str]]:
    return [(e.kind, e.path) for e in plan.entries]  # type: ignore[attr-defined]


def test_writable_root_and_existing_protected_path_in_depth_order() -> None:
    plan = plan_mounts(policy(protected=(f"{WS}/.git",)), facts(dirs=(f"{WS}/.git",)))
    assert kinds(plan) == [("writable", WS), ("read-only", f"{WS}/.git")]
    assert plan.gaps == ()


def test_missing_protected_path_gets_a_placeholder_at_its_first_missing_component() -> None:
    plan = plan_mounts(policy(protected=(f"{WS}/a/b/.dsh",)), facts(dirs=(WS,), extra=(f"{WS}/a/b/.dsh",)))
    assert ("placeholder", f"{WS}/a") in kinds(plan)
    assert not any(p.startswith(f"{WS}/a/") for _, p in kinds(plan))


def test_a_left_over_placeholder_is_taken_for_missing() -> None:
    plan = plan_mounts(policy(protected=(f"{WS}/.dsh",)), facts(dirs=(WS,), placeholders=(f"{WS}/.dsh",)))
    assert ("placeholder", f"{WS}/.dsh") in kinds(plan)


def test_directories_between_root_and_protected_path_are_pinned() -> None:
    deep = f"{WS}/sub/dir/.git"
    plan = plan_mounts(policy(protected=(deep,)), facts(dirs=(deep,)))
    assert kinds(plan) == [("writable", WS), ("pin", f"{WS}/sub"), ("pin", f"{WS}/sub/dir"), ("read-only", deep)]


def test_hidden_wins_over_every_other_rule() -> None:
    secret = f"{WS}/secret"
    plan = plan_mounts(policy(roots=(WS, f"{secret}/cache"), protected=(f"{secret}/.env",), hidden=(secret,)),
                       facts(dirs=(f"{secret}/cache",), files=(f"{secret}/.env",)))
    assert ("mask-dir", secret) in kinds(plan)
    assert not any(p.startswith(secret + "/") for _, p in kinds(plan))
    assert any("hidden wins" in line for line in plan.overridden)


def test_hidden_file_is_masked_by_a_file_and_a_missing_one_not_at_all() -> None:
    plan = plan_mounts(policy(hidden=(f"{WS}/.env", f"{WS}/gone")), facts(dirs=(WS,), files=(f"{WS}/.env",),
                                                                           extra=(f"{WS}/gone",)))
    assert ("mask-file", f"{WS}/.env") in kinds(plan)
    assert not any(p == f"{WS}/gone" for _, p in kinds(plan))


def test_nested_root_is_bound_only_under_a_read_only_rule() -> None:
    docs, cache, other = f"{WS}/docs", f"{WS}/docs/cache", f"{WS}/other"
    plan = plan_mounts(policy(roots=(WS, cache, other), read_only=(docs,)), facts(dirs=(cache, other)))
    got = kinds(plan)
    assert got.index(("writable", WS)) < got.index(("read-only", docs)) < got.index(("writable", cache))
    assert ("writable", other) not in got  # writable through the workspace already
    assert ("pin", docs) not in got


def test_symlinked_protected_path_is_a_gap_and_its_target_kept_read_only() -> None:
    link, target = f"{WS}/.vscode", f"{WS}/real-vscode"
    plan = plan_mounts(policy(protected=(link,)), facts(dirs=(target,), links={link: target}))
    assert ("read-only", target) in kinds(plan)
    assert [g.kind for g in plan.gaps] == ["protected-symlink"]
    assert plan.gaps_for("gvisor")[0].degradation == "gvisor-protected-symlink"


def test_a_symlink_the_command_cannot_replace_is_no_gap() -> None:
    link, target = f"{WS}/.vscode", f"{WS}/real-vscode"
    plan = plan_mounts(policy(protected=(link,)), facts(dirs=(target,), links={link: target}, fixed=(link,)))
    assert plan.gaps == ()
    assert ("read-only", target) in kinds(plan)


def test_protected_path_outside_every_writable_root_needs_nothing() -> None:
    plan = plan_mounts(policy(protected=("/elsewhere/.git",)), facts(dirs=(WS, "/elsewhere/.git")))
    assert kinds(plan) == [("writable", WS)]


def test_read_only_mode_has_nothing_writable_and_shows_workspace_and_home() -> None:
    plan = plan_mounts(policy(SandboxMode.READ_ONLY, protected=(f"{WS}/.git",), home="/w/home"),
                       facts(dirs=(WS, f"{WS}/.git", "/w/home")))
    assert not any(e.writable for e in plan.entries)
    assert kinds(plan) == [("show", "/w/home"), ("show", WS)]


def test_enclosing_repository_is_shown_and_never_over_a_hidden_path() -> None:
    plan = plan_mounts(policy(hidden=("/w/secret",)),
                       facts(dirs=(WS, "/w/secret"), enclosing=("/w", "/w/secret/gitdir")))
    assert ("show", "/w") in kinds(plan)
    assert ("show", "/w/secret/gitdir") not in kinds(plan)


def test_workspace_under_a_writable_bind_is_not_shown_again() -> None:
    plan = plan_mounts(policy(home="/w/ws/home"), facts(dirs=(WS, "/w/ws/home")))
    assert not plan.of_kind("show")


def test_danger_full_access_binds_workspace_and_roots_and_protects_nothing() -> None:
    pol = SandboxPolicy(mode=SandboxMode.DANGER_FULL_ACCESS, workspace=Path(WS), writable_roots=(Path("/x"),),
                        protected_paths=(Path(f"{WS}/.git"),), hidden_paths=(Path(f"{WS}/h"),))
    plan = plan_mounts(pol, facts(dirs=(WS, "/x", f"{WS}/.git", f"{WS}/h")))
    assert kinds(plan) == [("writable", "/x"), ("writable", WS)]


def test_a_path_the_snapshot_missed_is_an_error_never_a_guess() -> None:
    with pytest.raises(SandboxUnavailable, match="no fact gathered"):
        plan_mounts(policy(protected=(f"{WS}/.git",)), MountFacts({WS: PathFact("dir", WS)}))


def test_same_path_more_restrictive_rule_wins() -> None:
    plan = plan_mounts(policy(roots=(WS, f"{WS}/sub"), read_only=(f"{WS}/sub",)), facts(dirs=(f"{WS}/sub",)))
    assert ("read-only", f"{WS}/sub") in kinds(plan)
    assert ("writable", f"{WS}/sub") not in kinds(plan)


def test_private_tmp_hides_the_hosts_tmp_but_the_enclosing_repository() -> None:
    ws, ptmp = "/tmp/co/pkg", "/var/tmp/p"
    pol = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=Path(ws), writable_roots=(Path(ws), Path(ptmp)),
                        private_tmp=Path(ptmp))
    plan = plan_mounts(pol, facts(dirs=(ws, ptmp), enclosing=("/tmp/co", "/tmp/other-gitdir")))
    got = [(e.kind, e.path, e.source) for e in plan.entries]
    assert ("private-tmp", "/tmp", ptmp) in got
    assert ("read-only", "/tmp/co", None) in got and ("read-only", "/tmp/other-gitdir", None) in got
    assert got.index(("private-tmp", "/tmp", ptmp)) < got.index(("read-only", "/tmp/co", None))
    assert ("writable", ws, None) in got  # bound again on top of the private /tmp


def test_a_root_holding_tmp_keeps_the_hosts_tmp() -> None:
    pol = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=Path(WS), writable_roots=(Path(WS), Path("/tmp")),
                        private_tmp=Path("/var/tmp/p"))
    plan = plan_mounts(pol, facts(dirs=(WS, "/tmp", "/var/tmp/p")))
    assert not plan.of_kind("private-tmp")


STATE = "/c/dsh-sandbox"


def _with_state_parents(found: MountFacts, *parents: str) -> MountFacts:
    return MountFacts(found.paths, found.enclosing, found.enclosing_system, parents)


@pytest.mark.parametrize("mode", [SandboxMode.WORKSPACE_WRITE, SandboxMode.READ_ONLY])
def test_state_directories_are_masked_whole_and_the_runs_own_home_shown_again(mode: SandboxMode) -> None:
    """A state directory is masked whatever it holds (an entry made there after
    the start stays hidden); the hidden entries inside it need no mask of their
    own; the run's HOME comes back on top: writable as a root, else read-only."""
    home, other = f"{STATE}/home/ws-1", f"{STATE}/home/ws-2"
    roots = (WS, home) if mode is SandboxMode.WORKSPACE_WRITE else ()
    found = _with_state_parents(facts(dirs=(WS, home, other)), STATE, f"{STATE}/home")
    plan = plan_mounts(policy(mode, roots=roots, hidden=(other,), home=home), found)
    entries = kinds(plan)
    assert ("mask-dir", STATE) in entries and ("mask-dir", f"{STATE}/home") in entries
    assert ("mask-dir", other) not in entries
    shown = ("writable", home) if mode is SandboxMode.WORKSPACE_WRITE else ("read-only", home)
    assert shown in entries
    assert entries.index(("mask-dir", f"{STATE}/home")) < entries.index(shown)


def test_a_hidden_path_over_a_state_directory_still_wins() -> None:
    home = f"{STATE}/home/ws-1"
    found = _with_state_parents(facts(dirs=(WS, home)), STATE, f"{STATE}/home")
    plan = plan_mounts(policy(roots=(WS, home), hidden=("/c",), home=home), found)
    entries = kinds(plan)
    assert ("mask-dir", "/c") in entries
    assert not [e for e in entries if e[1].startswith(STATE)]


def _listed(found: MountFacts, listings: dict[str, tuple[str, ...]]) -> MountFacts:
    return MountFacts(found.paths, found.enclosing, found.enclosing_system, found.state_parents, listings)


def test_a_directory_of_mostly_hidden_entries_gets_one_mask_and_the_rest_shown_again() -> None:
    """Three hidden siblings and one other entry: one mask over their
    directory (an entry made there later is hidden too) and the other entry
    bound again read-only, two mounts instead of three."""
    homes = "/h/homes"
    hidden = tuple(f"{homes}/ws-{i}" for i in range(3))
    found = _listed(facts(dirs=(WS, *hidden, f"{homes}/notes")), {homes: ("ws-0", "ws-1", "ws-2", "notes")})
    entries = kinds(plan_mounts(policy(hidden=hidden), found))
    assert ("mask-dir", homes) in entries and ("read-only", f"{homes}/notes") in entries
    assert not [e for e in entries if e[0].startswith("mask") and e[1] != homes]
    assert entries.index(("mask-dir", homes)) < entries.index(("read-only", f"{homes}/notes"))


@pytest.mark.parametrize("case", ["a link among the others", "a FIFO or socket among the others",
                                  "more to show than hidden", "not listed"])
def test_hidden_siblings_keep_their_own_masks_where_one_mask_would_not_do(case: str) -> None:
    homes = "/h/homes"
    hidden = (f"{homes}/ws-0", f"{homes}/ws-1")
    others = ("a", "b", "c") if case == "more to show than hidden" else ("a",)
    links = {f"{homes}/a": "/elsewhere"} if case == "a link among the others" else None
    dirs = (WS, *hidden, *(f"{homes}/{n}" for n in others if links is None))
    found = facts(dirs=dirs, links=links)
    if case == "a FIFO or socket among the others":
        # A runtime that opens what it binds (runsc's gofer) blocks on a FIFO.
        found = MountFacts({**found.paths, f"{homes}/a": PathFact("other", f"{homes}/a")}, found.enclosing)
    if case != "not listed":
        found = _listed(found, {homes: ("ws-0", "ws-1", *others)})
    entries = kinds(plan_mounts(policy(hidden=hidden), found))
    assert [e for e in entries if e[0].startswith("mask")] == [("mask-dir", h) for h in hidden]
    assert not [e for e in entries if e[1].startswith(f"{homes}/") and e[0] == "read-only"]


def test_a_root_among_the_others_is_bound_writable_not_shown_read_only() -> None:
    homes = "/h/homes"
    hidden = (f"{homes}/ws-0", f"{homes}/ws-1")
    own = f"{homes}/mine"
    found = _listed(facts(dirs=(WS, *hidden, own)), {homes: ("ws-0", "ws-1", "mine")})
    entries = kinds(plan_mounts(policy(roots=(WS, own), hidden=hidden), found))
    assert ("mask-dir", homes) in entries and ("writable", own) in entries
    assert ("read-only", own) not in entries


def test_a_hidden_path_in_a_writable_root_cannot_be_moved_aside() -> None:
    """A mask moves with a directory above it that is renamed: every writable
    directory above a hidden path is pinned (a mount point cannot be
    renamed), so ``mv config config2`` cannot carry the secret out of its
    mask for the next run to read."""
    secret, outside = f"{WS}/config/deep/secret", "/srv/keys"
    entries = kinds(plan_mounts(policy(hidden=(secret, outside)), facts(files=(secret,), dirs=(outside,))))
    assert ("pin", f"{WS}/config") in entries and ("pin", f"{WS}/config/deep") in entries
    assert ("mask-file", secret) in entries and ("mask-dir", outside) in entries
    assert not [e for e in entries if e[0] == "pin" and not e[1].startswith(WS + "/")]


def test_a_hidden_path_that_now_resolves_elsewhere_refuses_the_run() -> None:
    """The policy holds each hidden path canonical; a directory above it
    exchanged for a link since then would send the mask to the link's target
    and leave the real one shown."""
    secret = f"{WS}/config/secret"
    swapped = facts(files=(secret, f"{WS}/decoy/secret"), links={f"{WS}/config": f"{WS}/decoy"})
    with pytest.raises(SandboxUnavailable, match=r"now resolves to .*decoy/secret.*retry"):
        plan_mounts(policy(hidden=(secret,)), swapped)
