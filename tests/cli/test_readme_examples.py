"""The README's "Use it" examples run as written.

Each line of the block is typed into bash, unchanged, in a small project made
for it: a Makefile with a ``test`` target, a git repository, a Python package
with a test and its own ``.venv`` (activated, as a developer's would be), and
``../build`` next to it.  A new line in the block without a check here fails
the test, so the README and the examples cannot drift apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.sandboxed import need_runner

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def use_it_lines() -> list[str]:
    section = README.read_text().split("## Use it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def _command(line: str) -> str:
    """The line as a shell reads it, without its trailing comment."""
    return line.split("  #", 1)[0].strip()


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="dsh-readme-", dir="/var/tmp")).resolve()
    proj = top / "proj"
    proj.mkdir()
    (top / "build").mkdir()
    (proj / "Makefile").write_text("test:\n\t@echo make-test-ran\n")
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "readme-demo"\nversion = "0.1"\n[tool.setuptools]\npy-modules = ["demo"]\n'
    )
    (proj / "demo.py").write_text("ANSWER = 42\n")
    (proj / "test_demo.py").write_text("import demo\n\ndef test_answer():\n    assert demo.ANSWER == 42\n")
    (proj / ".gitignore").write_text(".venv/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=proj, check=True)
    subprocess.run([*git, "add", "-A"], cwd=proj, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=proj, check=True)
    # The project's own venv, as a developer's: pip install -e . goes there.
    subprocess.run([sys.executable, "-m", "venv", str(proj / ".venv")], check=True)
    try:
        yield proj
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _run(line: str, proj: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # The project's venv first (activated), then the one dsh-sandbox and pytest live in.
    env["PATH"] = f"{proj / '.venv' / 'bin'}:{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(proj / ".venv")
    return subprocess.run(["bash", "-c", line], cwd=proj, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


Check = Callable[[subprocess.CompletedProcess[str], Path], None]


def _ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr


def _make(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "make-test-ran" in done.stdout


def _git_status(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "On branch" in done.stdout


def _pip(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    found = subprocess.run([str(proj / ".venv" / "bin" / "python"), "-c", "import demo; print(demo.ANSWER)"],
                           cwd="/", capture_output=True, text=True, check=False)
    assert found.stdout == "42\n", found


def _pytest_json(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    data = json.loads(done.stdout)
    assert data["exit_code"] == 0 and "1 passed" in data["stdout"]["text"], data


def _runners(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "bwrap" in done.stdout and "landlock" in done.stdout


def _explain(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    # What landlock cannot enforce is the point of the example: the python
    # profile accepts none of its gaps, so explain says so and exits 1.
    assert done.returncode in (0, 1), done
    assert "Traceback" not in done.stderr, done.stderr
    assert "mode: workspace-write (profile python)" in done.stdout and "network: off" in done.stdout
    assert "landlock" in done.stdout and ("REFUSED" in done.stdout or "cannot" in done.stdout), done.stdout


def _spec(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    names = [tool["name"] for tool in json.loads(done.stdout)]
    assert "bash" in names


def _tool_call(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "Makefile" in done.stdout and "demo.py" in done.stdout


def _config_show(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "workspace-write" in done.stdout


def _completion(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)


def _image(done: subprocess.CompletedProcess[str], proj: Path) -> None:
    _ok(done)
    assert "dsh-sandbox/runtime" in done.stdout


#: What each example line must do, by its command (the comment stripped).
CHECKS: dict[str, tuple[Check, tuple[str, ...]]] = {
    "dsh-sandbox run -- make test": (_make, ("bwrap",)),
    "dsh-sandbox run --mode read-only -- git status": (_git_status, ("bwrap",)),
    "dsh-sandbox run --profile python --network -c 'pip install -e .'": (_pip, ("bwrap",)),
    "dsh-sandbox run --runner bwrap --writable ../build --json -- pytest": (_pytest_json, ("bwrap",)),
    "dsh-sandbox runners": (_runners, ()),
    "dsh-sandbox profile explain python --runner landlock": (_explain, ("landlock",)),
    "dsh-sandbox tool spec --format anthropic": (_spec, ()),
    "dsh-sandbox tool call bash '{\"command\": \"ls\", \"description\": \"list\"}'": (_tool_call, ("bwrap",)),
    "dsh-sandbox config show": (_config_show, ()),
    'eval "$(dsh-sandbox completion bash)"': (_completion, ()),
    "dsh-sandbox image build --if-missing": (_image, ("docker",)),
}


def test_every_example_has_a_check() -> None:
    commands = [_command(line) for line in use_it_lines()]
    assert commands, "the README has a Use it block"
    missing = [c for c in commands if c not in CHECKS]
    assert not missing, f"README examples without a check in this test: {missing}"


@pytest.mark.parametrize("line", use_it_lines(), ids=_command)
def test_the_example_runs_as_written(line: str, project: Path) -> None:
    check, needs = CHECKS[_command(line)]
    for runner in needs:
        need_runner(runner)
    done = _run(line, project)
    check(done, project)
