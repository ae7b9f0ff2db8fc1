"""Approval rules cannot be widened by arguments: exact argv, or a prefix whose
further words are listed, and never a word that names a program or config."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from dsh.sandbox.approval import EscalationRequest
from dsh.sandbox.approval_rules import RulesApproval, RulesConfig, load_rules
from dsh.sandbox.command_words import DANGEROUS, Dangerous, dangerous_word, word_allowed
from dsh.sandbox.context import Context
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.modes import SandboxMode

FULL = SandboxMode.DANGER_FULL_ACCESS
WS = SandboxMode.WORKSPACE_WRITE
WORKDIR = "/work"


@pytest.fixture(autouse=True)
def dsh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DSH_HOME", str(tmp_path / "dsh-home"))
    yield tmp_path / "dsh-home"


def req(command: str, *, argv: tuple[str, ...] | None = None, shell: str = "bash") -> EscalationRequest:
    return EscalationRequest(command, WORKDIR, WS, FULL, "needed", "bash", "agent", argv=argv, shell=shell)


def approver(tmp_path: Path, body: str) -> RulesApproval:
    path = tmp_path / "rules.toml"
    path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{WORKDIR}"\n{body}')
    return RulesApproval(Context(), RulesConfig(path=str(path)))


def approves(rules: RulesApproval, command: str, **kw: object) -> bool:
    return rules.approve_escalation(req(command, **kw)).approved  # type: ignore[arg-type]


# -- the docs' own example, which used to approve a planted program ---------------------------
def test_the_git_push_example_does_not_approve_receive_pack(tmp_path: Path) -> None:
    rules = approver(tmp_path, 'prefix = "git push"\nargs = ["origin", "main", "--force-with-lease"]\n')
    assert approves(rules, "git push origin main")
    assert approves(rules, "git push --force-with-lease origin main")
    assert approves(rules, "git push")  # the prefix alone: nothing further
    for attack in ("git push --receive-pack=./rp.sh origin main", "git push --receive-pack ./rp.sh origin main",
                   "git push --receiv=./rp.sh origin main", "git push --exec=./rp.sh origin main",
                   "git push origin main --upload-pack=./x", "git push -c core.sshCommand=./x origin",
                   "git push origin other", "git push origin main -v"):
        assert not approves(rules, attack), attack


def test_a_prefix_rule_without_args_is_refused_at_load(tmp_path: Path) -> None:
    """An old rules file whose prefix approved any further words stops the run
    (exit 2 from the CLI) and says how to write it now."""
    path = tmp_path / "old.toml"
    path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{WORKDIR}"\nprefix = "git push"\n')
    with pytest.raises(ConfigError, match=r"old.toml:4: rule #1, key 'prefix': needs 'args'.*args = \[\]"):
        load_rules(path)


def test_the_table_blocks_the_planted_receive_pack_for_real(tmp_path: Path) -> None:
    """What the finding ran: git really runs an abbreviated --receive-pack, so
    the abbreviation is what the table has to catch."""
    repo, bare = tmp_path / "a", tmp_path / "r.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run([*git, "init", "-q", "--bare", str(bare)], check=True)
    script = repo / "rp.sh"
    script.write_text(f'#!/bin/sh\ntouch {tmp_path}/ran\nexec git-receive-pack "$@"\n')
    script.chmod(0o755)
    argv = ["git", "push", "--receiv=./rp.sh", str(bare), "HEAD:refs/heads/main"]
    subprocess.run(argv, cwd=repo, check=True, capture_output=True)
    assert (tmp_path / "ran").exists()  # git took the abbreviation
    assert dangerous_word(argv, "--receiv=./rp.sh") is not None
    assert not word_allowed(argv, "--receiv=./rp.sh", ["*", "--receiv=./rp.sh"])


# -- every entry of the table ------------------------------------------------------------------
def _forms(entry: Dangerous) -> list[str]:
    if entry.kind == "long":
        return [entry.word, f"{entry.word}=./x", entry.word[: max(4, len(entry.word) - 2)], entry.word[:3],
                f"{entry.word[1:]}=./x"]
    if entry.kind == "short":
        return [entry.word, f"{entry.word}./x", f"-q{entry.word[1]}"]
    if entry.kind == "assignment":
        return ["SHELL=./x", "CC=./x"]
    if entry.kind == "word":
        return [entry.word]
    if entry.kind == "plus":
        return ["+./tc", "+nightly"]
    return ["ext::sh -c touch% /tmp/x", "fd::17"]


@pytest.mark.parametrize("entry", DANGEROUS, ids=lambda e: f"{e.tool} {e.word}")
def test_each_dangerous_word_never_matches(entry: Dangerous, tmp_path: Path) -> None:
    prefix = [entry.tool, *(entry.subcommands[:1])]
    for word in _forms(entry):
        argv = [*prefix, word]
        assert dangerous_word(argv, word) is not None, word
        # Listed or matched by a pattern, it still does not match ...
        assert not word_allowed(argv, word, [word, "*"]), word
        # ... and a rules file that lists it is refused at load, naming why.
        path = tmp_path / "rules.toml"
        path.write_text(
            f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{WORKDIR}"\n'
            f"prefix = {prefix!r}\nargs = [{word!r}]\n".replace("'", '"')
        )
        with pytest.raises(ConfigError, match="never approved by a prefix rule"):
            load_rules(path)


def test_subcommand_entries_leave_other_subcommands_alone() -> None:
    assert dangerous_word(["git", "push", "-u"], "-u") is None  # --set-upstream
    assert dangerous_word(["git", "clone", "-u"], "-u") is not None  # --upload-pack
    # Whichever word git takes for the subcommand: an option's value does not hide it.
    assert dangerous_word(["git", "--namespace", "foo", "clone", "-u", "./x"], "-u") is not None
    assert dangerous_word(["git", "commit", "-s"], "-s") is None  # --signoff
    assert dangerous_word(["git", "merge", "-s"], "-s") is not None  # --strategy


# -- what a prefix rule's words are --------------------------------------------------------------
def test_compound_commands_never_match_a_prefix_or_argv_rule(tmp_path: Path) -> None:
    rules = approver(tmp_path, 'prefix = "git push"\nargs = ["origin", "main", "feature/*"]\n')
    assert approves(rules, "git push origin feature/x")
    for sneaky in ("git push origin main && rm -rf ~", "git push origin; id", "git push origin | sh",
                   "git push origin $(id)", "git push origin `id`", "git push origin > /etc/x",
                   "git push origin main\nid", "git push origin ${X}", "git push origin *",
                   "git push origin feature/?", "git push origin [m]ain", "git push origin ~/x",
                   "git push origin main # x", "git push origin \\main", "X=1 git push origin",
                   "(git push origin)", "{ git push origin; }", "git push origin 'main"):
        assert not approves(rules, sneaky), sneaky


def test_a_pattern_never_matches_an_option_nor_a_transport(tmp_path: Path) -> None:
    rules = approver(tmp_path, 'prefix = "git push"\nargs = ["*"]\n')
    assert approves(rules, "git push origin main")
    assert not approves(rules, "git push --force origin")
    assert not approves(rules, "git push 'ext::sh -c id' main")


def test_exact_argv_rule(tmp_path: Path) -> None:
    rules = approver(tmp_path, 'argv = ["make", "install"]\n')
    assert approves(rules, "make install")
    assert approves(rules, "'make' \"install\"")  # the same words
    assert approves(rules, "make install", argv=("make", "install"))  # run -- make install
    for other in ("make", "make install DESTDIR=/", "make install && id", "make -f x install"):
        assert not approves(rules, other), other
    assert not approves(rules, "make install", argv=("make", "install", "-f", "x"))
    # A PowerShell command is not read as bash: only an exact 'command' rule matches it.
    assert not approves(rules, "make install", shell="pwsh")


def test_args_list_any_order_and_patterns_only_for_known_tools(tmp_path: Path) -> None:
    rules = approver(tmp_path, 'prefix = ["cargo", "build"]\nargs = ["--release", "--locked", "-p", "app-*"]\n')
    assert approves(rules, "cargo build --locked --release -p app-core")
    assert not approves(rules, "cargo build --release --config build.rustc-wrapper=./w")
    assert not approves(rules, "cargo build -p other")
    with pytest.raises(ConfigError, match="patterns are allowed only for tools whose dangerous words are known"):
        approver(tmp_path, 'prefix = "rsync -a"\nargs = ["src/*"]\n')
    with pytest.raises(ConfigError, match="a pattern never matches an option"):
        approver(tmp_path, 'prefix = "git push"\nargs = ["--*"]\n')
    with pytest.raises(ConfigError, match="goes with 'prefix' only"):
        approver(tmp_path, 'argv = ["make"]\nargs = []\n')
    with pytest.raises(ConfigError, match="exactly one of"):
        approver(tmp_path, 'argv = ["make"]\ncommand = "make"\n')
    with pytest.raises(ConfigError, match="never approved by a prefix rule: git -u"):
        approver(tmp_path, 'prefix = "git"\nargs = ["push", "clone", "-u", "origin"]\n')
    with pytest.raises(ConfigError, match="not an assignment"):
        approver(tmp_path, 'prefix = "CC=x make"\nargs = []\n')
    # An unknown tool gets exactly its listed words.
    rules = approver(tmp_path, 'prefix = "rsync -a"\nargs = ["src/", "dest/"]\n')
    assert approves(rules, "rsync -a src/ dest/")
    assert not approves(rules, "rsync -a -e ./x src/ dest/")


def test_argv_words_are_checked_as_they_are(tmp_path: Path) -> None:
    """``run -- ARGV`` has no shell: its words are the rule's words, quotes and all."""
    rules = approver(tmp_path, 'prefix = "git push"\nargs = ["origin", "main"]\n')
    assert approves(rules, "git push origin main", argv=("git", "push", "origin", "main"))
    assert not approves(rules, "git push --receive-pack=./rp.sh origin",
                        argv=("git", "push", "--receive-pack=./rp.sh", "origin"))
    assert not approves(rules, "x", argv=("git", "push", "origin main"))


def test_the_docs_examples_load(tmp_path: Path) -> None:
    """Every TOML block of docs/approvals.md loads as written."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "approvals.md"
    blocks = doc.read_text().split("```toml\n")[1:]
    assert blocks
    for i, block in enumerate(blocks):
        path = tmp_path / f"doc{i}.toml"
        path.write_text(block.split("```", 1)[0])
        assert load_rules(path), block
    # The git push example is safe as written.
    rules = RulesApproval(Context(), RulesConfig(path=str(tmp_path / "doc0.toml")))
    app = str(Path("~/src/app").expanduser())

    def push(command: str) -> bool:
        return rules.approve_escalation(EscalationRequest(command, app, WS, FULL, "j", "t", "o")).approved

    assert push("git push origin main --force-with-lease")
    assert not push("git push --receive-pack=./rp.sh origin main")


def test_argv_bytes_match_only_as_text(tmp_path: Path, workspace: Path) -> None:
    """A non-UTF-8 word has no text a rule could name: no argv or prefix rule matches it."""
    from dsh.executors import escalation
    from dsh.executors.seam import ShellExecutor
    from dsh.sandbox.session import SessionSpec, build_session

    path = tmp_path / "rules.toml"
    path.write_text(f'[[rule]]\nmode = "danger-full-access"\nworkdir = "{workspace}"\nprefix = "make"\nargs = ["*"]\n')
    rules = RulesApproval(Context(), RulesConfig(path=str(path)))
    spec = SessionSpec(mode="workspace-write", workspace=str(workspace), executor="bash-sandbox")
    with build_session(spec) as ctx:
        shell = ctx.require(ShellExecutor)

        def asked(*argv: bytes) -> bool:
            return escalation.ask(ctx, shell, mode=FULL, command="make x", workdir=str(workspace),
                                  justification="j", tool="t", owner="o", approval=rules, argv=argv).approved

        assert asked(b"make", b"all")
        assert not asked(b"make", b"\xff")
