"""docs/profiles.md is generated from profiles/schema.json and kept up to date."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "gen_profile_reference.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_profile_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_profile_reference_is_what_the_schema_generates() -> None:
    committed = (ROOT / "docs" / "profiles.md").read_text()
    assert committed == generator().render(), "run: python3 docs/gen_profile_reference.py"


def test_reference_names_every_schema_key_and_builtin_profile() -> None:
    schema = json.loads((ROOT / "profiles" / "schema.json").read_text())
    text = (ROOT / "docs" / "profiles.md").read_text()
    for key in schema["properties"]:
        assert f"| `{key}` |" in text
    for key in schema["properties"]["limits"]["properties"]:
        assert f"| `limits.{key}` |" in text
    for path in (ROOT / "profiles").glob("*.toml"):
        assert f"| `{path.stem}` |" in text


def test_check_mode_fails_on_a_stale_file_and_names_the_fix(tmp_path: Path) -> None:
    module = generator()
    module.OUTPUT = tmp_path / "profiles.md"
    module.OUTPUT.write_text("stale\n")
    assert module.main(["gen", "--check"]) == 1
    assert module.main(["gen"]) == 0
    assert module.main(["gen", "--check"]) == 0
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_schema_id_is_not_a_web_address_that_does_not_resolve() -> None:
    schema = json.loads((ROOT / "profiles" / "schema.json").read_text())
    assert schema["$id"].startswith("urn:dsh-sandbox:"), schema["$id"]
