"""The list of places sessions of one uid keep their state in (``state_places``).

It can only make a run hide more of the user's own state: an entry counts
when it is a directory of the uid named ``dsh-sandbox``, not a link, and the
list itself counts only as a regular file of the uid nobody else may write.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dsh.sandbox import own_state, state_places


@pytest.fixture
def base(trusted_dir: Path) -> Path:
    # Outside /tmp: a place in the shared temporary directory is never listed.
    return trusted_dir


@pytest.fixture
def listed(base: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = base / "own" / state_places.LIST_NAME
    monkeypatch.setattr(state_places, "list_path", lambda uid: path)
    return path


def _place(base: Path, name: str = "dsh-sandbox") -> Path:
    place = base / name
    place.mkdir(parents=True)
    return Path(os.path.realpath(place))


def test_a_recorded_place_is_hidden_by_every_run(base: Path, listed: Path) -> None:
    place = _place(base / "agent" / ".cache")
    state_places.record([place])
    assert state_places.recorded(os.geteuid()) == (place,)
    assert place in {path for path, _holds in own_state.run_state_dirs({"HOME": str(base / "me")})}
    assert oct(listed.stat().st_mode & 0o777) == oct(0o600)
    assert oct(listed.parent.stat().st_mode & 0o777) == oct(0o700)


def test_recording_twice_keeps_one_line(base: Path, listed: Path) -> None:
    place = _place(base / "a")
    state_places.record([place])
    state_places.record([place, place])
    assert listed.read_text().splitlines() == [str(place)]


def test_only_state_directories_of_this_uid_count(base: Path, listed: Path) -> None:
    good = _place(base / "good")
    named_otherwise = _place(base / "x", "etc")
    link_base = base / "link" / ".cache"
    link_base.mkdir(parents=True)
    (link_base / "dsh-sandbox").symlink_to(good)
    gone = base / "gone" / "dsh-sandbox"
    listed.parent.mkdir(mode=0o700)
    listed.write_text("\n".join([str(good), str(named_otherwise), str(link_base / "dsh-sandbox"), str(gone),
                                 "relative/dsh-sandbox", "/"]) + "\n")
    listed.chmod(0o600)
    assert state_places.recorded(os.geteuid()) == (good,)
    if os.geteuid() == 0:
        theirs = _place(base / "theirs")
        os.chown(theirs, 65534, 65534)
        listed.write_text(f"{good}\n{theirs}\n")
        assert state_places.recorded(os.geteuid()) == (good,)


def test_a_list_others_may_write_is_ignored(base: Path, listed: Path) -> None:
    place = _place(base / "a")
    state_places.record([place])
    listed.chmod(0o622)
    assert state_places.recorded(os.geteuid()) == ()
    listed.chmod(0o600)
    listed.unlink()
    listed.symlink_to(base / "elsewhere")
    (base / "elsewhere").write_text(f"{place}\n")
    assert state_places.recorded(os.geteuid()) == ()


def test_a_list_that_cannot_be_written_changes_nothing(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = base / "file"
    blocker.write_text("")
    monkeypatch.setattr(state_places, "list_path", lambda uid: blocker / state_places.LIST_NAME)
    state_places.record([_place(base / "a")])  # no error: best effort
    assert state_places.recorded(os.geteuid()) == ()


def test_a_place_in_the_shared_tmp_is_not_listed(tmp_path: Path, listed: Path) -> None:
    state_places.record([_place(tmp_path.resolve() / "a")])
    assert not listed.exists() or listed.read_text() == ""


def test_a_long_list_loses_the_places_that_are_gone(base: Path, listed: Path) -> None:
    kept = _place(base / "kept")
    listed.parent.mkdir(mode=0o700)
    gone = [str(base / f"gone{i}" / "dsh-sandbox") for i in range(state_places.PRUNE_AT)]
    listed.write_text("\n".join([str(kept), *gone]) + "\n")
    listed.chmod(0o600)
    new = _place(base / "new")
    state_places.record([new])
    assert listed.read_text().splitlines() == [str(kept), str(new)]
    assert oct(listed.stat().st_mode & 0o777) == oct(0o600)


def test_a_recorded_place_removed_is_not_made_again(base: Path, listed: Path) -> None:
    """A session's recorded place, removed (its HOME deleted with it), stays
    gone: a run hides the places others recorded while they exist and makes
    only its own.  The list is judged at most once a second, so a run right
    after the removal still names the place; it made it again, parents and
    all, which left dead sessions' directories behind."""
    place = _place(base / "agent" / "home" / ".cache")
    state_places.record([place])
    me = {"HOME": str(base / "me"), "XDG_CACHE_HOME": str(base / "me" / ".cache")}
    assert place in set(own_state.hidden_state([], me)) | {p for p, _h in own_state.run_state_dirs(me)}
    shutil.rmtree(base / "agent")
    own_state.hidden_state([], me)  # what every run does while it plans
    assert not (base / "agent").exists()
    assert (base / "me" / ".cache" / "dsh-sandbox").is_dir()  # its own places are still made
