"""dsh-sandbox's own state and installation (``own_state``, ``own_install``): what is hidden, what is refused."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.own_install import install_paths, refuse_install_in_roots
from dsh.sandbox.own_state import hidden_state, run_state_dirs, state_refusal
from dsh.sandbox.policy_paths import is_within


def _env(trusted_dir: Path) -> dict[str, str]:
    return {"HOME": str(trusted_dir / "home"), "DSH_HOME": str(trusted_dir / "dsh")}


def test_other_homes_and_spill_sessions_are_hidden_the_own_home_is_not(trusted_dir: Path) -> None:
    env = _env(trusted_dir)
    homes = trusted_dir / "home" / ".cache" / "dsh-sandbox" / "home"
    own, other = homes / "ws-000000000000", homes / "other-111111111111"
    for path in (own, other, trusted_dir / "home" / ".cache" / "dsh-sandbox" / "spill" / "session-1"):
        path.mkdir(parents=True)
    (trusted_dir / "dsh").mkdir()
    (trusted_dir / "dsh" / "escalations.jsonl").write_text("{}\n")
    hidden = hidden_state([own], env)
    assert other in hidden and own not in hidden and homes not in hidden
    assert homes.parent / "spill" in hidden and trusted_dir / "dsh" / "escalations.jsonl" in hidden
    # A HOME made after the last listing is hidden at the next resolve.
    late = homes / "late-222222222222"
    late.mkdir()
    assert late in hidden_state([own], env)
    late.rmdir()
    assert late not in hidden_state([own], env)
    # Without a HOME of its own there, the whole directory goes.
    assert hidden_state([], env)[0] == homes.parent


def test_state_refusal_both_ways_but_the_own_home(trusted_dir: Path) -> None:
    env = _env(trusted_dir)
    cache = trusted_dir / "home" / ".cache" / "dsh-sandbox"
    own = cache / "home" / "ws-000000000000"
    assert "it contains" in (state_refusal(trusted_dir, (own,), env) or "")
    assert "it is inside" in (state_refusal(cache / "home" / "other", (own,), env) or "")
    assert state_refusal(own, (own,), env) is None
    assert state_refusal(trusted_dir / "project", (own,), env) is None
    assert "configuration" in (state_refusal(trusted_dir / "home" / ".config", (), env) or "")


def test_the_installation_inside_a_root_is_refused() -> None:
    paths = {path for path, _what, _inner in install_paths()}
    assert Path(os.path.realpath(sys.prefix)) in paths and Path(os.path.realpath(sys.executable)) in paths
    prefix = Path(os.path.realpath(sys.prefix))
    with pytest.raises(ConfigError, match=r"--writable X: refusing .*sys.prefix.*pipx install dsh-sandbox"):
        refuse_install_in_roots([("--writable X", prefix.parent)])
    site = next(path for path, what, _inner in install_paths() if "site-packages" in what)
    with pytest.raises(ConfigError, match="around it"):
        refuse_install_in_roots([("--writable X", site / "some-package")])
    refuse_install_in_roots([("--writable X", Path("/var/tmp/not-the-installation"))])


def test_an_editable_installs_path_hook_is_no_directory_of_the_workspace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """setuptools' default editable install puts a key, not a path, on
    ``sys.path`` and ``dsh.__path__``: taken as a directory relative to the
    working directory it refused every workspace-write run started in the
    workspace.  A real relative entry is still that directory."""
    import dsh

    hook = "__editable__.dsh_sandbox-0.1.0.finder.__path_hook__"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [hook, *sys.path])
    monkeypatch.setattr(dsh, "__path__", [*dsh.__path__, hook])
    install_paths.cache_clear()
    try:
        refuse_install_in_roots([("workspace", tmp_path)])
        monkeypatch.setattr(sys, "path", ["src", *sys.path])
        install_paths.cache_clear()
        with pytest.raises(ConfigError, match=r"workspace: refusing .*src \(a directory on dsh-sandbox's import"):
            refuse_install_in_roots([("workspace", tmp_path)])
    finally:
        monkeypatch.undo()
        install_paths.cache_clear()


def _inside_run_state(path: Path, environ: dict[str, str]) -> bool:
    from dsh.sandbox.own_state import run_state_dirs

    return any(path == top or top in path.parents for top, _holds in run_state_dirs(environ))


@pytest.mark.parametrize("home", ["rel", None])
def test_the_homes_are_made_where_every_run_hides_them_whatever_home_says(
    home: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative or missing HOME: ``~`` used to lead the HOMEs one way (the
    current directory, the password database) while the state every run hides
    was looked for another way (nowhere), so other workspaces' HOMEs showed."""
    import pwd

    from dsh.sandbox.sandbox_home import homes_dir

    monkeypatch.chdir(tmp_path)
    environ = {"PATH": "/usr/bin:/bin", **({"HOME": home} if home is not None else {})}
    homes = homes_dir(environ)
    assert homes.is_absolute() and not str(homes).startswith(str(tmp_path)), homes
    assert homes == Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache" / "dsh-sandbox" / "home"
    assert _inside_run_state(homes, environ)


def test_a_relative_dsh_home_is_the_log_directory_every_run_hides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsh.sandbox.approval import default_log_file

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DSH_HOME", "reldsh")
    log = default_log_file()
    assert log == tmp_path / "reldsh" / "escalations.jsonl"
    assert _inside_run_state(log, dict(os.environ))


def test_missing_state_directories_are_made_before_a_run_so_they_can_be_masked(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime)}
    hidden_state([], environ)
    made = runtime / "dsh-sandbox"
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700 and not any(made.iterdir())
    assert (tmp_path / "home" / ".dsh").is_dir() and (tmp_path / "home" / ".cache" / "dsh-sandbox").is_dir()


def test_xdg_runtime_dir_counts_only_when_private_to_this_uid(tmp_path: Path) -> None:
    from dsh.sandbox.own_state import runtime_dir

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    link = tmp_path / "link"
    link.symlink_to(private)
    assert runtime_dir({"XDG_RUNTIME_DIR": str(private)}) == private
    for value in ("/", "/dev", str(shared), str(link), "relative", "", str(tmp_path / "missing")):
        assert runtime_dir({"XDG_RUNTIME_DIR": value}) is None, value


def test_every_place_a_session_of_this_uid_could_use_is_state(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Listed whatever this environment says: a session started without
    ``XDG_RUNTIME_DIR`` or ``XDG_CACHE_HOME`` (cron, an agent harness) puts its
    private /tmp where the defaults lead, and one started with them elsewhere."""
    import dsh.sandbox.own_state as own_state

    login = tmp_path / "run-user"
    (login / str(os.geteuid())).mkdir(parents=True, mode=0o700)
    (login / str(os.geteuid())).chmod(0o700)
    monkeypatch.setattr(own_state, "LOGIN_RUNTIME", str(login))
    home, cache = tmp_path / "home", tmp_path / "cache"
    bare = {"HOME": str(home)}
    listed = {p for p, _holds in run_state_dirs(bare)}
    assert login / str(os.geteuid()) / "dsh-sandbox" in listed  # no XDG_RUNTIME_DIR here
    with_cache = {p for p, _holds in run_state_dirs({**bare, "XDG_CACHE_HOME": str(cache)})}
    assert {cache / "dsh-sandbox", home / ".cache" / "dsh-sandbox"} <= with_cache


def test_a_planted_state_link_is_never_followed_to_make_or_mask(tmp_path: Path) -> None:
    """A command whose writable root holds another session's ``XDG_RUNTIME_DIR``
    or ``DSH_HOME`` plants dangling links there: the host (often root) must not
    make their targets, nor take the targets for its state."""
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    victim = tmp_path / "victim"  # stands for /etc/nologin, /usr/local/...
    (runtime / "dsh-sandbox").symlink_to(victim / "deep")
    (runtime / "dshlog").symlink_to(tmp_path / "victim2")
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(runtime),
               "DSH_HOME": str(runtime / "dshlog")}
    hidden_state([], environ)
    assert not victim.exists() and not (tmp_path / "victim2").exists()
    listed = {p for p, _holds in run_state_dirs(environ)}
    assert not any(is_within(p, victim) or is_within(p, tmp_path / "victim2") for p in listed)
    assert (tmp_path / "home" / ".cache" / "dsh-sandbox").is_dir()  # the rest is made as before


def test_the_record_of_denied_runs_is_hidden_like_the_escalation_log(tmp_path: Path) -> None:
    """A re-run may be approved on what the record says the denied run
    changed: no run may read it (nor, where the runner hides by mask, write it)."""
    log_dir = tmp_path / "dsh"
    log_dir.mkdir(mode=0o700)
    for name in ("escalations.jsonl", "denied-runs.jsonl"):
        (log_dir / name).write_text("{}\n")
    hidden = hidden_state([], {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "DSH_HOME": str(log_dir)})
    assert {log_dir / "escalations.jsonl", log_dir / "denied-runs.jsonl"} <= set(hidden)
