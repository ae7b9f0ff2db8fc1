"""One walk per policy path (``dsh.sandbox.pins``): links judged where they
are met, the result held by fd and named from it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dsh.sandbox.errors import ConfigError
from dsh.sandbox.pins import PinStore, walk


def test_a_link_a_run_could_plant_is_refused_where_it_is_met(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match=r"root: x resolves through the symlink .*link -> .*real"):
        walk("root", "x", tmp_path / "link" / "sub")


def test_a_link_in_a_system_directory_is_followed() -> None:
    system_link = next((p for p in (Path("/lib"), Path("/bin"), Path("/var/run")) if p.is_symlink()), None)
    if system_link is None:
        pytest.skip("SANDBOX_UNAVAILABLE: no symlink in a system directory on this machine")
    resolved = walk("root", str(system_link), system_link)
    assert resolved.pin is not None
    try:
        assert resolved.path == Path(os.path.realpath(system_link))
        assert resolved.pin.identity == (os.stat(system_link).st_dev, os.stat(system_link).st_ino)
    finally:
        os.close(resolved.pin.fd)


def test_the_pin_keeps_what_was_checked_after_a_swap(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    store = PinStore()
    try:
        pin = store.walk("workspace", str(ws), ws).pin
        assert pin is not None and pin.path == ws and pin.is_dir
        os.rename(ws, tmp_path / "moved")
        ws.symlink_to(outside)
        # The fd is still the directory that was checked, wherever it is now.
        assert os.readlink(f"/proc/self/fd/{pin.fd}") == str(tmp_path / "moved")
        # And walking the name again meets the link: refused, never followed.
        with pytest.raises(ConfigError, match="resolves through the symlink"):
            store.walk("workspace", str(ws), ws)
    finally:
        store.close()


def test_missing_tails_are_kept_as_written(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    missing = walk("hidden", "x", tmp_path / "gone" / "deeper")
    assert missing.pin is None and missing.path == tmp_path / "gone" / "deeper"
    # ``missing/..`` cancels out, as realpath reads it.
    back = walk("hidden", "x", tmp_path / "gone" / ".." / "there")
    assert back.pin is not None and back.path == tmp_path / "there"
    os.close(back.pin.fd)


def test_relative_paths_hang_off_the_pinned_base(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "build").mkdir(parents=True)
    store = PinStore()
    try:
        base = store.walk("workspace", str(ws), ws).pin
        assert base is not None
        os.rename(ws, tmp_path / "moved")
        ws.mkdir()  # another directory at the old name: not the one pinned
        build = store.walk("root", "build", Path("build"), base=base)
        assert build.pin is not None and build.path == tmp_path / "moved" / "build"
    finally:
        store.close()
