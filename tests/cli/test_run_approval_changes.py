"""``run --approval`` after a denied run that rewrote its own inputs, through
the real CLI and the real runners, as the caller and as nobody.

The attack: ``make`` in workspace-write rewrites the ``Makefile`` (allowed) and
then writes outside (denied); a rule approving ``make`` under
danger-full-access used to re-run the rewritten Makefile unsandboxed."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.runners.test_trusted_files import LANDLOCK_ACCEPT, NOBODY, cli
from tests.support.require import require_runner
from tests.support.terminal import read_terminal

RUNNERS = ["bwrap", "landlock"]
USERS = ["caller", "nobody"]


@dataclass(frozen=True)
class Box:
    """A caller's home, its workspace, a directory outside every writable root
    (``out``) and one the command cannot write but the caller owns (``cfg``:
    the rules file and the profile)."""

    base: Path
    user: str
    runner: str

    @property
    def ws(self) -> Path:
        return self.base / "ws"

    @property
    def out(self) -> Path:
        return self.base / "out"

    @property
    def cfg(self) -> Path:
        return self.base / "cfg"

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], "HOME": str(self.base), "TMPDIR": str(self.base / "tmp"),
                "LANG": "C.UTF-8", "DSH_HOME": str(self.base / "dsh")}

    def argv(self, *args: str) -> list[str]:
        # A quiet set of writable roots (no shared /tmp): what changes there is the command's doing.
        profile = self.cfg / "profile.toml"
        profile.write_text('extends = "workspace-write"\nexclude_tmp = true\n'
                           + (LANDLOCK_ACCEPT if self.runner == "landlock" else ""))
        return [*cli(self.user), "run", "--runner", self.runner, "--profile", str(profile), *args]

    def popen(self, *args: str, **kwargs: object) -> subprocess.Popen[bytes]:
        if self.user == "nobody":
            kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
        return subprocess.Popen(self.argv(*args), cwd=self.ws, env=self.env(), **kwargs)  # type: ignore[call-overload, no-any-return]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=240)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())

    def rules(self, body: str) -> str:
        path = self.cfg / "rules.toml"
        path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{self.ws}"\n{body}')
        path.chmod(0o644)
        return f"rules:{path}"

    def log(self) -> list[dict[str, object]]:
        return [json.loads(x) for x in (self.base / "dsh" / "escalations.jsonl").read_text().splitlines()]


@pytest.fixture(params=[(r, u) for r in RUNNERS for u in USERS], ids=lambda p: f"{p[0]}-{p[1]}")
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    runner, user = request.param
    require_runner(runner)
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("SANDBOX_UNAVAILABLE: running as nobody needs root")
    base = Path(tempfile.mkdtemp(prefix="dsh-approval-changes-", dir="/var/tmp")).resolve()
    os.chmod(base, 0o755)
    for sub in ("ws", "out", "tmp", "dsh"):
        (base / sub).mkdir()
        if user == "nobody":
            os.chown(base / sub, NOBODY, NOBODY)
    if user == "nobody":
        os.chown(base, NOBODY, NOBODY)
    (base / "cfg").mkdir(mode=0o755)  # the caller's own, not the command's
    try:
        yield Box(base, user, runner)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def plant_makefile(box: Box) -> None:
    """A Makefile that rewrites itself to write ``pwned`` outside, then is denied."""
    evil = f"all:\\n\\ttouch {box.out}/pwned\\n"
    (box.ws / "Makefile").write_text(f"all:\n\tprintf '{evil}' > Makefile\n\ttouch {box.out}/denied\n")
    if box.user == "nobody":
        os.chown(box.ws / "Makefile", NOBODY, NOBODY)


def test_rules_do_not_approve_a_rerun_of_a_rewritten_makefile(box: Box) -> None:
    plant_makefile(box)
    done = box.run("--approval", box.rules('command = "make"\n'), "--", "make")
    assert "escalation to danger-full-access denied by approval-rules" in done.stderr, done.stderr
    assert f"modified {box.ws}/Makefile" in done.stderr
    assert done.returncode != 0
    assert not (box.out / "pwned").exists() and not (box.out / "denied").exists()
    assert "pwned" in (box.ws / "Makefile").read_text()  # the denied run did rewrite it
    [record] = box.log()
    assert record["decision"] == "deny" and record["argv"] == ["make"]
    assert record["changes"]["modified"] == [str(box.ws / "Makefile")]  # type: ignore[index]


def test_rules_still_approve_when_the_denied_run_changed_nothing(box: Box) -> None:
    """The control: the same rule, a run that only tried to write outside."""
    (box.ws / "Makefile").write_text(f"all:\n\ttouch {box.out}/made\n")
    done = box.run("--approval", box.rules('argv = ["make"]\n'), "--", "make")
    assert "re-running once under danger-full-access" in done.stderr, done.stderr
    assert done.returncode == 0 and (box.out / "made").exists()
    [record] = box.log()
    assert record["decision"] == "approve_once" and record["changes"]["total"] == 0  # type: ignore[index]


def test_the_prompt_lists_the_rewritten_makefile(box: Box) -> None:
    plant_makefile(box)
    master, slave = os.openpty()

    def take_terminal() -> None:  # a new session whose controlling terminal is the pty
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc = box.popen("--approval", "prompt", "--", "make", stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True, preexec_fn=take_terminal)
        os.close(slave)
        shown = read_terminal(master, time.monotonic() + 180, b"n\n").decode(errors="replace")
        code = proc.wait(timeout=60)
    finally:
        os.close(master)
    assert "changed:       1 file(s) under the writable roots by the denied run" in shown, shown
    assert f"modified  {box.ws}/Makefile" in shown
    assert code != 0 and not (box.out / "pwned").exists()
    [record] = box.log()
    assert record["decision"] == "deny" and record["provider"] == "approval-prompt"


def test_a_prefix_rule_does_not_run_a_receive_pack_of_the_commands_choosing(box: Box) -> None:
    """``git push --receive-pack=./rp.sh`` under the docs' ``git push`` rule:
    the script is there already (not the denied run's doing), the rule lists
    its arguments, and the option is not among them."""
    remote = box.out / "remote.git"
    git = ["git", "-c", "init.defaultBranch=main", "-c", "user.name=t", "-c", "user.email=t@t",
           "-c", "safe.directory=*"]
    subprocess.run([*git, "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run([*git, "init", "-q", str(box.ws)], check=True)
    subprocess.run([*git, "-C", str(box.ws), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "-C", str(box.ws), "remote", "add", "origin", str(remote)], check=True)
    script = box.ws / "rp.sh"
    script.write_text(f'#!/bin/sh\ntouch {box.out}/rp-ran\nexec git-receive-pack "$@"\n')
    script.chmod(0o755)
    if box.user == "nobody":  # git refuses a repository someone else owns
        for path in (box.ws, *box.ws.rglob("*")):
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
    rules = box.rules('prefix = "git push"\nargs = ["origin", "main", "--force-with-lease"]\n')
    done = box.run("--approval", rules, "--", "git", "push", "--receive-pack=./rp.sh", "origin", "main")
    assert "escalation to danger-full-access denied by approval-rules: no rule approves" in done.stderr, done.stderr
    assert not (box.out / "rp-ran").exists()
    [record] = box.log()
    assert record["argv"] == ["git", "push", "--receive-pack=./rp.sh", "origin", "main"]
    assert record["changes"]["total"] == 0  # type: ignore[index]  # refused for its words alone
