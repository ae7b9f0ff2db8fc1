"""``dsh-sandbox completion``: the printed script completes in a real shell."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dsh.cli.app import COMMANDS, plugin_commands

from tests.support.cli import cli


@pytest.fixture
def prog_dir(tmp_path: Path) -> Path:
    """A PATH directory whose ``dsh-sandbox`` is this checkout's CLI: the
    completion script calls the program back by name, as a user's shell does."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    prog = bindir / "dsh-sandbox"
    prog.write_text(f'#!/bin/sh\nexec {sys.executable} -P -m dsh.cli "$@"\n')
    prog.chmod(0o755)
    return bindir


def bash_complete(prog_dir: Path, script: str, words: list[str]) -> list[str]:
    """Source ``script`` in bash, press TAB after ``words`` and return COMPREPLY."""
    driver = (
        f"{script}\n"
        # What bash sets before calling the function `complete -F` named.
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        'spec=$(complete -p dsh-sandbox) || exit 3\n'
        'func=${spec#*-F }; func=${func%% *}\n'
        '"$func" dsh-sandbox "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{prog_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", "--norc", "--noprofile", "-c", driver],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completes_subcommands_in_a_real_bash(prog_dir: Path) -> None:
    done = cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    script = done.stdout.decode()
    assert bash_complete(prog_dir, script, ["dsh-sandbox", "ru"]) == ["run", "runners"]
    assert bash_complete(prog_dir, script, ["dsh-sandbox", "run", "--mo"]) == ["--mode"]
    assert "read-only" in bash_complete(prog_dir, script, ["dsh-sandbox", "run", "--mode", "r"])


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("zsh", "#compdef dsh-sandbox"), ("fish", "complete --no-files --command dsh-sandbox")],
)
def test_zsh_and_fish_scripts_call_back_the_same_completion(shell: str, marker: str, prog_dir: Path) -> None:
    done = cli("completion", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout.decode()
    assert f"_DSH_SANDBOX_COMPLETE={shell}_complete" in done.stdout.decode()
    # What the script asks for when the user presses TAB after `dsh-sandbox ru`.
    env = {**os.environ, "_DSH_SANDBOX_COMPLETE": f"{shell}_complete"}
    env.update(COMP_WORDS="dsh-sandbox ru", COMP_CWORD="1")
    if shell == "fish":
        env["COMP_CWORD"] = "ru"  # fish passes the current token, not its index
    answer = subprocess.run(
        [str(prog_dir / "dsh-sandbox")], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert answer.returncode == 0, answer.stderr
    # The help shown beside each name comes from the same table as --help.
    run_help, runners_help = COMMANDS["run"][2], COMMANDS["runners"][2]
    if shell == "zsh":  # type, value, help: one line each
        expected = ["plain", "run", run_help, "plain", "runners", runners_help]
    else:  # type,value<TAB>help
        expected = [f"plain,run\t{run_help}", f"plain,runners\t{runners_help}"]
    assert answer.stdout.splitlines() == expected


def test_unknown_shell_is_a_usage_error_naming_the_choices() -> None:
    done = cli("completion", "tcsh")
    assert done.returncode == 2
    assert b"Invalid value for 'SHELL': 'tcsh' is not one of 'bash', 'zsh', 'fish'" in done.stderr
    assert b"Traceback" not in done.stderr


def test_completing_a_subcommand_name_imports_no_subcommand_module() -> None:
    probe = (
        "import sys\n"
        "from dsh.cli import main\n"
        "try:\n"
        "    main([])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)\n"
    )
    env = {**os.environ, "_DSH_SANDBOX_COMPLETE": "bash_complete", "COMP_WORDS": "dsh-sandbox ", "COMP_CWORD": "1"}
    done = subprocess.run([sys.executable, "-P", "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plugins = plugin_commands()
    assert "image" in plugins  # a runner's command, registered through the entry-point group
    assert done.stdout.split() == [f"plain,{name}" for name in sorted({*COMMANDS, *plugins})]
    # The modules `dsh-sandbox NAME` would import, and the packages they pull in.
    subcommand_modules = {module for module, _, _ in COMMANDS.values()}
    subcommand_modules |= {target.partition(":")[0] for target in plugins.values()}
    packages = {module.rsplit(".", 1)[0] for module in subcommand_modules} - {"dsh.cli"}
    loaded = set(done.stderr.splitlines())
    assert not loaded & subcommand_modules, sorted(loaded & subcommand_modules)
    assert not {m for m in loaded for p in packages if m == p or m.startswith(p + ".")}, sorted(loaded)
