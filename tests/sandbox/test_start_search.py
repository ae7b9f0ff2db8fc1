"""The protected-file search a session makes at its start serves its first
command when that follows within a moment (``dsh-sandbox run`` would walk the
tree twice in a few milliseconds); every other command searches again, and
what the host makes in that moment is judged after the run, like what it
makes while the command runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.sandbox import policy_service
from dsh.sandbox.policy_service import PolicyService

from tests.sandbox.test_protected_scan import make_repo, service


def count_searches(svc: PolicyService, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    refresh = svc._index.refresh

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return refresh(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(svc._index, "refresh", counted)
    return calls


def test_the_first_command_takes_the_search_made_at_the_start(workspace: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    git = make_repo(workspace / "old")
    svc = service(workspace)
    calls = count_searches(svc, monkeypatch)
    first = svc.resolve()
    assert calls == []
    assert git in first.protected_paths
    svc.baseline(first)
    svc.resolve()  # the next command's
    assert len(calls) == 1


def test_a_command_later_than_the_moment_searches_again(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = service(workspace)
    monkeypatch.setattr(policy_service, "START_SEARCH_REUSE_S", -1.0)
    git = make_repo(workspace / "late")
    assert git in svc.resolve().protected_paths


def test_once_a_command_started_the_next_searches_again(workspace: Path) -> None:
    svc = service(workspace)
    svc.baseline(svc._default_policy)  # a command started on the policy the start resolved
    git = make_repo(workspace / "late")
    assert git in svc.resolve().protected_paths


def test_another_mode_is_searched_for_itself(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    svc = service(workspace)
    calls = count_searches(svc, monkeypatch)
    svc.resolve("read-only")  # other roots (none): never the start's search
    git = make_repo(workspace / "late")
    assert git in svc.resolve().protected_paths  # the start's search was not kept for it
    assert len(calls) == 2


def test_a_repository_the_host_makes_in_that_moment_is_reported_after_the_run(workspace: Path) -> None:
    svc = service(workspace)
    git = make_repo(workspace / "late")  # the host, between the start and the first command
    policy = svc.resolve()
    assert git not in policy.protected_paths  # searched a moment before it existed
    before = svc.baseline(policy)
    assert before is not None
    (git / "hooks" / "pre-commit").write_text("#!/bin/sh\n")  # what the command writes there
    (git / "hooks" / "post-checkout").symlink_to("/etc/passwd")
    changes = svc.changed_files(policy, before)
    assert {git / "config", git / "hooks" / "pre-commit"} <= set(changes.paths)
    assert git / "hooks" / "post-checkout" in changes.removed
    assert not (git / "hooks" / "post-checkout").is_symlink()
