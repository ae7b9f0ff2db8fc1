"""dsh-sandbox's own state and installation (``own_state``): what is hidden, what is refused."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.own_state import hidden_state, install_paths, refuse_install_in_roots, state_refusal


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
