"""The attack on dsh-sandbox's own directories through the real CLI, as root
and as nobody: one run (its cache elsewhere) makes a later run's
``$XDG_CACHE_HOME`` writable and plants ``dsh-sandbox`` there as a link to a
directory of its choosing; the later run (``home = "host"``, runner chosen
automatically) must make, chmod, write and remove nothing there."""

from __future__ import annotations

import os
import stat

from tests.cli.test_own_state import Caller, caller  # noqa: F401  (the fixture)
from tests.support.require import require_runner


def test_a_planted_state_link_is_never_followed_by_the_host(caller: Caller) -> None:  # noqa: F811
    require_runner("bwrap")
    cache_a, cache_b, target = caller.base / "cache-a", caller.base / "cache-b", caller.base / "target"
    for d in (cache_a, cache_b, target / "tmp" / "session-victim"):
        d.mkdir(parents=True)
    (target / "tmp" / "session-victim" / "work").write_text("keep")
    caller.own(cache_a, cache_b, target)
    os.chmod(target / "tmp", 0o1777)
    # The plant: a sandboxed command of a run whose cache is elsewhere.
    plant = caller.run("run", "--runner", "bwrap", "--writable", str(cache_b), "--",
                       "ln", "-s", str(target), str(cache_b / "dsh-sandbox"),
                       env=caller.env(XDG_CACHE_HOME=str(cache_a)))
    assert plant.returncode == 0, plant.stderr
    assert os.readlink(cache_b / "dsh-sandbox") == str(target)
    profile = caller.base / "host-home.toml"
    profile.write_text('extends = "workspace-write"\nhome = "host"\n')
    profile.chmod(0o644)
    later = caller.run("run", "--profile", str(profile), "--", "sh", "-c", 'echo "$TMPDIR"',
                       env=caller.env(XDG_CACHE_HOME=str(cache_b)))
    assert "Traceback" not in later.stderr
    assert later.returncode == 0, later.stderr
    assert not later.stdout.strip().startswith(str(target)), later.stdout
    # The host afterwards: the target exactly as the attacker left it.
    assert sorted(p.name for p in target.iterdir()) == ["tmp"]
    assert stat.S_IMODE(os.stat(target / "tmp").st_mode) == 0o1777
    assert sorted(p.name for p in (target / "tmp").iterdir()) == ["session-victim"]
    assert (target / "tmp" / "session-victim" / "work").read_text() == "keep"
