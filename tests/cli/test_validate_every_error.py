"""``profile validate`` lists every error of a file at once, each with its
line: an unknown parent beside the file's own mistakes, and every writable
root the policy refuses (``run`` names them all too), not only the first."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli, trusted_config_dir


def problems(stderr: bytes) -> list[str]:
    lines = stderr.decode().splitlines()
    assert lines and "Traceback" not in stderr.decode(), stderr
    return [line.strip() for line in lines[1:]] if lines[0].endswith("problems:") else lines


def test_an_unknown_parent_is_listed_with_the_files_other_errors(workspace: Path) -> None:
    bad = trusted_config_dir() / "bad-parent.toml"
    bad.write_text('extends = "pyhton"\nnetwork = "yes"\n')
    done = cli("profile", "validate", str(bad), "--workspace", str(workspace))
    assert done.returncode == 2
    found = problems(done.stderr)
    assert len(found) == 2, found
    assert "extends at line 1: unknown profile 'pyhton'; did you mean 'python'?" in found[0]
    assert "key 'network' at line 2" in found[1]


def test_every_refused_writable_root_is_listed_with_its_own_line(workspace: Path) -> None:
    bad = trusted_config_dir() / "bad-roots.toml"
    bad.write_text('extends = "workspace-write"\nwritable_roots = [\n  "/etc",\n  "/usr",\n]\n')
    done = cli("profile", "validate", str(bad), "--workspace", str(workspace))
    assert done.returncode == 2
    found = problems(done.stderr)
    assert len(found) == 2, found
    assert found[0].startswith(f"{bad}:3: ") and "writable_roots entry '/etc'" in found[0]
    assert found[1].startswith(f"{bad}:4: ") and "writable_roots entry '/usr'" in found[1]


def test_run_names_every_refused_root(workspace: Path) -> None:
    done = cli("run", "--writable", "/etc", "--writable", "/var", "--", "true", cwd=workspace)
    assert done.returncode == 2
    found = problems(done.stderr.replace(b"dsh-sandbox: ", b"", 1))
    assert [line.split(":", 1)[0] for line in found] == ["--writable /etc", "--writable /var"], found
