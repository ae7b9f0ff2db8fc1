"""``profile validate`` says "ok" exactly when ``run`` accepts the profile."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import pytest
from dsh.cli import main
from dsh.sandbox.errors import UsageError
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

PATHS = ["/", "/etc", "~", "~/.ssh", "~/.config", "~/src", "sub", "missing", "planted", "/var/spool"]
DEGRADED = ["landlock-protected-paths", "bwrap-limit-memory", "landlock-protected-path", "no-such-thing"]
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10, max_value=10**20),
    st.sampled_from(['"512MiB"', '"1e400"', '"0"', '"2000000TiB"']),
)


def _toml(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


@st.composite
def profiles(draw: st.DrawFn) -> str:
    lines = []
    mode = draw(st.sampled_from([None, "read-only", "workspace-write"]))
    if mode:
        lines.append(f'mode = "{mode}"')
    for key in ("writable_roots", "read_only_paths", "hidden_paths", "force_writable_roots"):
        chosen = draw(st.lists(st.sampled_from(PATHS), max_size=2))
        if chosen:
            lines.append(f"{key} = [{', '.join(repr(p).replace(chr(39), chr(34)) for p in chosen)}]")
    degraded = draw(st.lists(st.sampled_from(DEGRADED), max_size=2))
    if degraded:
        lines.append(f"accept_degraded = [{', '.join(f'{d!r}' for d in degraded)}]".replace("'", '"'))
    limits = draw(st.dictionaries(st.sampled_from(["wall_time_s", "max_processes", "max_memory"]), NUMBERS))
    if limits:
        lines.append("[limits]")
        lines.extend(f"{k} = {_toml(v) if not isinstance(v, str) else v}" for k, v in limits.items())
    return "\n".join(lines) + "\n"


def _validate_ok(path: Path, workspace: Path) -> bool:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["profile", "validate", str(path), "--workspace", str(workspace)])
        except SystemExit as exc:
            assert exc.code == 2, err.getvalue()
            assert "Traceback" not in err.getvalue()
            return False
    assert out.getvalue().startswith("ok: ")
    return True


def _run_accepts(path: Path, workspace: Path) -> bool:
    from dsh.cli.run import RunOptions, open_run_session
    from dsh.sandbox.config_trust import refuse_untrusted_config

    try:
        ctx = open_run_session(RunOptions(profile=str(path), workspace=str(workspace), argv=("true",)))
    except UsageError:
        return False
    try:
        refuse_untrusted_config(ctx, None)
    except UsageError:
        return False
    finally:
        ctx.close()
    return True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=profiles())
def test_validate_and_run_agree(
    text: str, workspace: Path, trusted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = trusted_dir / "home"
    for sub in (".ssh", ".config", "src"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TMPDIR", raising=False)
    (workspace / "sub").mkdir(exist_ok=True)
    if not (workspace / "planted").is_symlink():
        (workspace / "planted").symlink_to(home / "src")
    path = trusted_dir / "p.toml"
    path.write_text(text)
    ok = _validate_ok(path, workspace)
    event(f"validate ok: {ok}")
    assert ok == _run_accepts(path, workspace), text


def test_validate_refuses_what_run_refuses(workspace: Path, trusted_dir: Path) -> None:
    """The cases main said "ok" to: a root run refuses, a misspelt degradation."""
    for text in ('writable_roots = ["/"]\n', 'accept_degraded = ["landlock-protected-path"]\n',
                 "[limits]\nwall_time_s = nan\n"):
        path = trusted_dir / "p.toml"
        path.write_text(text)
        assert not _validate_ok(path, workspace), text
    inside = workspace / "p.toml"
    inside.write_text('extends = "read-only"\n')
    assert not _validate_ok(inside, workspace)
