"""Links a run plants inside a git dir, which the host's git would write through.

Where git may commit (the default), ``COMMIT_EDITMSG``, ``FETCH_HEAD``,
``logs/HEAD`` and the directories under ``refs`` are writable, and git opens
them by name, following links: a run that points them at files outside the
sandbox made the host's next ``git commit``, ``fetch`` or ``tag`` write
there.  Each runner, as root and as nobody: the links are removed after the
run and reported, the host's git then writes only inside the repository (and
does write: the check is not vacuous), and a link that was there before the
run (the user's own) stays.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import NOBODY, Box, repo, runner_for
from tests.runners.test_trusted_files import box as box
from tests.runners.test_trusted_gitsurface import host_git, run

ORIGINAL = "ORIGINAL\n"


@pytest.mark.parametrize("name", ["bwrap", "docker", "landlock", "gvisor"])
def test_links_planted_in_a_git_dir_are_removed_before_host_git_writes_through_them(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    outside = box.ws.parent / "outside"
    outside.mkdir()
    files = {rel: outside / rel.replace("/", "-") for rel in ("COMMIT_EDITMSG", "FETCH_HEAD", "logs/HEAD")}
    for target in files.values():
        target.write_text(ORIGINAL)
    tags = outside / "tags"
    tags.mkdir()
    sub = box.ws / "sub"
    git_dir = repo(sub)
    host_git(box, sub, "commit", "-q", "--allow-empty", "-m", "first")
    users_own = git_dir / "objects" / "info" / "users-link"
    users_own.symlink_to(outside / "kept")  # made before the run: the user's, left alone
    box.own()
    plant = "; ".join(f"ln -sfn {target} .git/{rel}" for rel, target in files.items())
    # A FIFO git would block on; gVisor keeps FIFOs inside its own kernel,
    # where the host never sees them.
    fifo = ["ORIG_HEAD"] if name != "gvisor" else []
    ran = run(box, runner, f"cd sub && {plant} && rm -rf .git/refs/tags && ln -s {tags} .git/refs/tags "
                           f"&& {' '.join(['mkfifo', *(f'.git/{f}' for f in fifo)]) if fifo else 'true'}; exit 0")
    assert ran.returncode == 0, ran.err
    planted = [git_dir / rel for rel in (*files, "refs/tags", *fifo)]
    for path in planted:
        assert not os.path.lexists(path), f"{path} was left in place"
        assert str(path) in ran.err, f"{path} not reported: {ran.err}"
    assert "removed" in ran.err
    assert os.path.islink(users_own)
    host_git(box, sub, "commit", "-q", "--allow-empty", "-m", "host commit")
    host_git(box, sub, "tag", "t1")
    for target in files.values():
        assert target.read_text() == ORIGINAL, target
    assert list(tags.iterdir()) == []
    log = subprocess.run(["git", "-c", "safe.directory=*", "log", "--format=%s"], cwd=sub, capture_output=True,
                         text=True, check=False).stdout
    assert log.splitlines()[0] == "host commit"  # the host's git did commit, through the repository's own files
    assert (git_dir / "refs" / "tags" / "t1").is_file()
    assert "host commit" in (git_dir / "logs" / "HEAD").read_text()


def test_only_the_runs_links_in_a_root_are_removed(tmp_path: Path) -> None:
    """Links older than the run are the user's and stay; in a repository the
    run made every link is the run's; a git dir outside the roots is not
    touched (the run could not write there)."""
    from dsh.sandbox.git_dir_links import remove_planted
    from dsh.sandbox.trusted_changes import run_started_ns

    git_dir = tmp_path / "r" / ".git"
    for i in range(50):
        (git_dir / "objects" / f"{i:02x}").mkdir(parents=True)
        (git_dir / "objects" / f"{i:02x}" / "link").symlink_to("/etc/passwd")  # before: not the run's
    since = run_started_ns() + 1_000_000_000
    assert remove_planted({git_dir: since}, [tmp_path]) == ((), ())
    assert all(os.path.islink(git_dir / "objects" / f"{i:02x}" / "link") for i in range(50))
    (git_dir / "objects" / "new").mkdir()
    assert remove_planted({git_dir: 0}, [tmp_path / "elsewhere"]) == ((), ())  # not in a root: untouched
    removed, incomplete = remove_planted({git_dir: 0}, [tmp_path])  # a repository the run made: every link
    assert len(removed) == 50 and incomplete == ()


def test_a_maze_in_the_git_dir_cannot_hide_a_link_past_the_bound(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run filled a new directory of the git dir with more directories than
    the walk lists, named to come first, then linked ``logs/HEAD`` outside:
    the names git writes by are looked through first, and a walk the bound
    stopped is reported, never passed over."""
    from dsh.sandbox import git_dir_links
    from dsh.sandbox.trusted_changes import run_started_ns

    git_dir = tmp_path / "r" / ".git"
    (git_dir / "logs").mkdir(parents=True)
    since = run_started_ns()
    for i in range(60):
        (git_dir / "aaa" / f"d{i:03d}").mkdir(parents=True)
    (git_dir / "logs" / "HEAD").symlink_to("/etc/passwd")
    monkeypatch.setattr(git_dir_links, "_DIR_LIMIT", 20)
    removed, incomplete = git_dir_links.remove_planted({git_dir: since}, [tmp_path])
    assert removed == (git_dir / "logs" / "HEAD",) and incomplete == (git_dir,)


def test_a_repository_the_search_no_longer_finds_still_gets_its_links_removed(tmp_path: Path) -> None:
    """A run that fills the workspace past the search's bound hides the
    repositories after it from the search: the ones known at the start are
    looked through all the same."""
    from dsh.sandbox.protected_scan import Found
    from dsh.sandbox.trusted_changes import Baseline, git_dir_identities, git_dirs_since, run_started_ns

    dot_git = tmp_path / "r" / ".git"
    dot_git.mkdir(parents=True)
    before = Baseline(run_started_ns(), Found((dot_git,), (), (), ((dot_git, dot_git.stat().st_ino),)),
                      git_dir_identities([dot_git]))
    after = Found((), (), (tmp_path,))
    assert dot_git in git_dirs_since(before, after)


@pytest.mark.parametrize("name", ["bwrap", "landlock"])
def test_a_git_dir_moved_into_place_in_a_later_run_has_its_links_removed(name: str, box: Box) -> None:
    """Run 1 writes ``sub/.git`` naming a git dir that does not exist yet and
    prepares one, with a link to a file outside, where the search does not
    look (deep in the sandbox HOME); run 2 moves it into place.  Its entries
    keep their old ctimes, but the git dir is not the one there at the start:
    all of it is the run's, and the link goes."""
    runner = runner_for(name, box)
    victim = box.ws.parent / "victim"
    victim.write_text(ORIGINAL)
    home = box.ws.parent / "home"  # the user's, where the sandbox HOME is made
    home.mkdir()
    if box.user == "nobody":
        os.chown(home, NOBODY, NOBODY)
    env = {"HOME": str(home)}
    box.own()
    stage = '"$HOME/a/b/stage"'
    first = run(box, runner, f'mkdir -p "$HOME/a/b" && git init -q "$HOME/a/b/w" && mv "$HOME/a/b/w/.git" {stage} '
                             f'&& ln -s {victim} {stage}/COMMIT_EDITMSG && mkdir -p sub '
                             '&& printf "gitdir: %s\\n" "$HOME/a/b/gd" > sub/.git && echo staged', env)
    assert first.returncode == 0 and first.out == "staged\n", first.err
    second = run(box, runner, 'mv "$HOME/a/b/stage" "$HOME/a/b/gd"; exit 0', env)
    assert second.returncode == 0, second.err
    assert "COMMIT_EDITMSG" in second.err and "removed" in second.err, second.err
    host_git(box, box.ws / "sub", "commit", "-q", "--allow-empty", "-m", "host commit")
    assert victim.read_text() == ORIGINAL
