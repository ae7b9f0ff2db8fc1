"""Ways around the trusted-file protection and report, tried through the real CLI
on real runners as root and as nobody, and judged from the host after the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import LANDLOCK_ACCEPT, NOBODY, Box, cli, docker_group, profile, repo, runner_for
from tests.runners.test_trusted_files import box as box

RUNNERS = ["bwrap", "docker"]


@pytest.mark.parametrize("name", [*RUNNERS, "landlock"])
def test_repository_and_trusted_dir_renamed_into_place_are_reported(name: str, box: Box) -> None:
    """Run 1 leaves a git dir without HEAD (not a repository, nothing to report);
    run 2 adds HEAD and renames it to ``sub/.git``: nothing under it has a new
    ctime, yet the host's next ``git status`` in ``sub`` would run its fsmonitor."""
    runner = runner_for(name, box)
    # Landlock keeps nothing read-only inside a root (accepted here): the report still holds.
    extra = ("--profile", profile(box, LANDLOCK_ACCEPT)) if name == "landlock" else ()
    box.own()
    stage = (
        "mkdir -p st/objects st/refs st/hooks sub vs && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > st/config"
        " && printf '#!/bin/sh\\n' > st/hooks/post-checkout && echo {} > vs/tasks.json"
    )
    first = box.run(runner, stage, *extra)
    assert first.returncode == 0, first.err
    assert "created or changed" not in first.err
    second = box.run(runner, "echo 'ref: refs/heads/main' > st/HEAD && mv st sub/.git && mv vs .vscode", *extra)
    assert second.returncode == 0, second.err
    for rel in ("sub/.git/config", "sub/.git/hooks/post-checkout", ".vscode/tasks.json"):
        assert f"{box.ws}/{rel}" in second.err, rel
    if name == "landlock":
        return
    # From now on it is a repository like any other: read-only.
    third = box.run(runner, "echo x >> sub/.git/config; exit 0")
    assert "x" not in (box.ws / "sub" / ".git" / "config").read_text().splitlines()
    assert "created or changed" not in third.err


@pytest.mark.parametrize("name", RUNNERS)
def test_repository_in_an_unlistable_directory_is_not_hidden(name: str, box: Box) -> None:
    """``chmod 0311`` hides what a directory holds from a non-root host: the
    search must say where it could not look, and the next run must refuse."""
    runner = runner_for(name, box)
    box.own()
    ran = box.run(runner, "mkdir -p a && git init -q a/r && chmod 0311 a")
    try:
        assert ran.returncode == 0, ran.err
        if box.user == "nobody":
            assert f"incomplete in {box.ws}/a" in ran.err
            refused = box.run(runner, "true")
            assert refused.returncode == 125 and "protected-scan-incomplete" in refused.err
        else:  # root lists it anyway: the repository itself is reported
            assert f"{box.ws}/a/r/.git/config" in ran.err
    finally:
        os.chmod(box.ws / "a", 0o755)


@pytest.mark.parametrize("name", RUNNERS)
def test_working_tree_files_the_git_config_runs_stay_read_only(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    git_dir = repo(box.ws / "sub")
    files = {"scripts/clean.sh": "#!/bin/sh\ncat\n", "project.gitconfig": "[core]\n", ".x/y.sh": "#!/bin/sh\n"}
    for rel, text in files.items():
        (box.ws / "sub" / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.ws / "sub" / rel).write_text(text)
    with (git_dir / "config").open("a") as config:
        config.write('[filter "x"]\n\tclean = ./scripts/clean.sh %f\n[include]\n\tpath = ../project.gitconfig\n'
                     "[core]\n\tfsmonitor = sh .x/y.sh\n")
    box.own()
    script = "cd sub && for f in scripts/clean.sh project.gitconfig .x/y.sh; do echo pwn >> $f; done; exit 0"
    ran = box.run(runner, script)
    assert ran.returncode == 0, ran.err
    for rel, text in files.items():
        assert (box.ws / "sub" / rel).read_text() == text, rel


@pytest.fixture()
def sticky() -> Iterator[Path]:
    """A sticky, world-writable directory owned by a third user (as /tmp is by root)."""
    path = Path(tempfile.mkdtemp(prefix="dsh-sticky-")).resolve()
    os.chmod(path, 0o1777)
    os.chown(path, 12345, 12345)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", RUNNERS)
def test_another_users_link_at_a_protected_name_in_a_sticky_temp_dir_is_no_refusal(
    name: str, box: Box, sticky: Path
) -> None:
    """Any local user can plant ``$TMPDIR/.dsh -> X``: that must not refuse every
    workspace-write run, and the command cannot replace the link (sticky bit).
    By default the host's $TMPDIR is no root at all (the session's private one
    replaces it); shared, the link is judged as below."""
    runner = runner_for(name, box)
    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: planting another user's link needs root")
    target = box.ws.parent / "target"
    target.mkdir()
    link = sticky / ".dsh"
    link.symlink_to(target)
    os.lchown(link, 12346, 12346)  # neither the caller, nor nobody, nor the directory's owner
    box.own()
    argv = [*cli(box.user), "run", "--runner", runner, "-c",
            f'rm -f "{link}"; ln -sfn /etc "{link}"; echo pwn > "{link}/x"; '
            'rm -f "$TMPDIR/.dsh"; ln -sfn /etc "$TMPDIR/.dsh"; echo ran']
    env = {"PATH": os.environ["PATH"], "HOME": str(box.ws.parent), "LANG": "C.UTF-8", "TMPDIR": str(sticky)}
    kwargs: dict[str, object] = {}
    if box.user == "nobody":
        kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": docker_group()}
    proc = subprocess.run(argv, cwd=box.ws, env=env, capture_output=True, text=True, timeout=240,
                          check=False, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr
    assert os.readlink(link) == str(target)
    assert not (target / "x").exists()


@pytest.mark.parametrize("owner", ["another user", "the caller"])
def test_a_shared_sticky_temp_dir_link_is_judged_by_who_can_replace_it(sticky: Path, owner: str) -> None:
    """With ``tmp = "shared"`` the host's $TMPDIR is a root: another user's link at a
    protected name there cannot be replaced by the command (no degradation); the
    caller's own could be (the runners' symlink degradation, refused by default)."""
    from dsh.runners.bwrap.mounts import SYMLINK_DEGRADATION, plan_mounts
    from dsh.runners.docker.spec import build_spec
    from dsh.sandbox.modes import SandboxMode
    from dsh.sandbox.policy import SandboxPolicy

    if os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: planting another user's link needs root")
    target = Path(tempfile.mkdtemp(prefix="dsh-sticky-target-", dir="/var/tmp"))
    ws = Path(tempfile.mkdtemp(prefix="dsh-sticky-ws-", dir="/var/tmp"))
    try:
        link = sticky / ".dsh"
        link.symlink_to(target)
        uid = 12346 if owner == "another user" else 0
        os.lchown(link, uid, uid)
        policy = SandboxPolicy(mode=SandboxMode.WORKSPACE_WRITE, workspace=ws, writable_roots=(ws, sticky),
                               protected_paths=(link,))
        planned = {g.degradation for g in plan_mounts(policy).degradations}
        replaceable = owner == "the caller"
        assert (SYMLINK_DEGRADATION in planned) == replaceable
        docker = build_spec(policy, image="i", user="0:0", pids=None, memory=None, machine="x86_64")
        assert ("docker-protected-symlink" in {g.degradation for g in docker.gaps}) == replaceable
        # A container user given by name is not known here: every such link is a gap.
        named = build_spec(policy, image="i", user="root", pids=None, memory=None, machine="x86_64")
        assert {g.degradation for g in named.gaps} == {"docker-protected-symlink"}
    finally:
        shutil.rmtree(target, ignore_errors=True)
        shutil.rmtree(ws, ignore_errors=True)


@pytest.mark.parametrize("name", RUNNERS)
def test_a_repository_made_between_runs_in_a_kept_tree_stays_read_only(name: str, box: Box) -> None:
    """The second run starts from the listings the first one kept: the directory
    the repository was made in has a new ctime, so it is listed again, and the
    repository's hooks and config stay read-only."""
    runner = runner_for(name, box)
    for a in range(5):
        for b in range(5):
            (box.ws / f"a{a}" / f"b{b}").mkdir(parents=True)
    box.own()
    time.sleep(2.1)  # settled: a directory changed in the 2 s before it is listed is not kept
    first = box.run(runner, "true")
    assert first.returncode == 0, first.err
    assert list((box.ws.parent / ".cache" / "dsh-sandbox" / "tree-index").iterdir())  # what the next run reads
    subprocess.run(["git", "init", "-q", str(box.ws / "a3" / "b4" / "r")], check=True)
    box.own()
    second = box.run(runner, "echo pwn > a3/b4/r/.git/hooks/pre-commit; echo pwn >> a3/b4/r/.git/config; exit 0")
    assert second.returncode == 0, second.err
    assert not (box.ws / "a3" / "b4" / "r" / ".git" / "hooks" / "pre-commit").exists()
    assert "pwn" not in (box.ws / "a3" / "b4" / "r" / ".git" / "config").read_text()
