"""A repository planted deep in the sandbox HOME, reached through a link in
the workspace, is reported.

The sandbox HOME is searched one level deep (tool caches are huge): a run
makes ``$HOME/deep/docs`` a repository whose config runs ``core.fsmonitor``
and links ``ws/docs -> $HOME/deep/docs``; the host's ``cd ws/docs && git
status`` would run it.  The run's report must name the link (bwrap, docker,
landlock; root and nobody).
"""

from __future__ import annotations

import pytest

from tests.runners.test_trusted_files import Box, runner_for
from tests.runners.test_trusted_files import box as box
from tests.runners.test_trusted_gitsurface import reported, run

PLANT = ('mkdir -p "$HOME/deep/docs" && cd "$HOME/deep/docs" && git init -q . && '
         'git config core.fsmonitor "sh fsm.sh" && echo "touch pwned" > fsm.sh && '
         'cd - >/dev/null && ln -s "$HOME/deep/docs" docs && echo planted')


@pytest.mark.parametrize("name", ["bwrap", "docker", "landlock"])
def test_a_link_to_a_repository_deep_in_the_sandbox_home_is_reported(name: str, box: Box) -> None:
    runner = runner_for(name, box)
    cache = box.ws.parent / "cache"
    cache.mkdir()
    box.own()
    ran = run(box, runner, PLANT, {"XDG_CACHE_HOME": str(cache)})
    assert "planted" in ran.out, ran.err
    reported(ran, box.ws / "docs")
