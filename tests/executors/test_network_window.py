"""Refusals of a session's allowlist proxy while two commands ran at once.

The commands of a session share one proxy, so a refusal cannot be told apart
by command: one that asks for a host makes the host appear in a concurrent
command's report too.  That report says so (``network_denied_shared``, and a
marker that another command may have asked), so a hostile command cannot make
a benign one look as if it needed a host; a command that ran alone is not
marked.  Real bwrap, the real proxy."""

from __future__ import annotations

import threading
from pathlib import Path

from dsh.executors.seam import ShellExecRequest, ShellExecutor, ShellRunResult
from dsh.sandbox.session import SessionSpec, build_session
from dsh.tools.render import sandbox_lines

from tests.support.sandboxed import need_runner

ASK = "python3 -c \"import urllib.request as u; u.urlopen('http://{host}:9/', timeout=20)\" 2>/dev/null; echo asked"


def test_a_refusal_while_another_command_ran_is_marked_shared(workspace: Path) -> None:
    need_runner("bwrap")
    ctx = build_session(SessionSpec(executor="bash-sandbox", workspace=str(workspace), mode="workspace-write",
                                    runner="bwrap", allow_domains=("127.0.0.1",)))
    try:
        shell = ctx.require(ShellExecutor)

        def run(command: str) -> ShellRunResult:
            return shell.execute(shell.resolve(ShellExecRequest(command=command, timeout_ms=60_000))).result()

        results: dict[str, ShellRunResult] = {}
        benign = threading.Thread(target=lambda: results.setdefault("benign", run("sleep 3; echo benign")))
        benign.start()
        results["asking"] = run("sleep 0.5; " + ASK.format(host="127.0.0.2"))
        benign.join(60)
        alone = run(ASK.format(host="127.0.0.3"))
    finally:
        ctx.close()
    for name in ("benign", "asking"):
        facts = results[name].sandbox
        assert facts is not None and facts.network_denied == ("127.0.0.2",), (name, facts)
        assert facts.network_denied_shared, name
    assert results["benign"].stdout.text == "benign\n"
    assert alone.sandbox is not None and alone.sandbox.network_denied == ("127.0.0.3",)
    assert not alone.sandbox.network_denied_shared
    shared_lines = sandbox_lines(results["benign"].sandbox)
    assert any("127.0.0.2 denied (another command of this session ran meanwhile" in line for line in shared_lines)
    assert not any("meanwhile" in line for line in sandbox_lines(alone.sandbox))
