"""The OCI config of a warm sandbox (pure: no runsc needed)."""

from __future__ import annotations

import pytest
from dsh.runners.gvisor import spec
from dsh.runners.gvisor.argv import encode_argv, text_env
from dsh.runners.gvisor.spec import Identity, build_config, oci_mounts, process, refuse_too_many_binds
from dsh.sandbox.errors import SandboxUnavailable, UsageError
from dsh.sandbox.mount_plan import MountEntry, MountPlan
from dsh.sandbox.policy import ResourceLimits

PLAN = MountPlan((MountEntry("writable", "/w/ws", "writable root"), MountEntry("show", "/w/home", "sandbox home"),
                  MountEntry("read-only", "/w/ws/.git", "protected"), MountEntry("mask-dir", "/w/ws/s", "hidden")))


def test_root_filesystem_is_the_hosts_read_only_and_binds_are_nosuid() -> None:
    config = build_config(PLAN, identity=Identity(0, 0), limits=ResourceLimits(), masked=("/run/state",))
    assert config["root"] == {"path": "/", "readonly": True}
    dests = [m["destination"] for m in config["mounts"]]
    assert dests == ["/proc", "/w/ws", "/w/ws/.git", "/w/ws/s", "/run/state"]  # no bind for a `show` entry
    for m in config["mounts"][1:]:
        assert {"nosuid", "nodev"} <= set(m["options"])
    assert "ro" in config["mounts"][2]["options"] and "rw" in config["mounts"][1]["options"]
    assert {"type": "network"} in config["linux"]["namespaces"]


def test_no_capability_and_no_new_privileges_for_every_process() -> None:
    proc = process(["true"], env=["A=1"], cwd="/w/ws", identity=Identity(1000, 1000, (27,)))
    assert proc["noNewPrivileges"] is True
    assert all(v == [] for v in proc["capabilities"].values())
    assert proc["user"] == {"uid": 1000, "gid": 1000, "additionalGids": [27]}


def test_without_root_only_the_caller_is_mapped_as_root_inside() -> None:
    config = build_config(PLAN, identity=Identity(1000, 1000, (27,)), limits=ResourceLimits())
    assert {"type": "user"} in config["linux"]["namespaces"]
    assert config["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1000, "size": 1}]
    assert config["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 1000, "size": 1}]
    assert config["process"]["user"]["uid"] == 0 and config["process"]["user"]["additionalGids"] == []


def test_limits_are_the_sandboxs_rlimits() -> None:
    config = build_config(PLAN, identity=Identity(0, 0),
                          limits=ResourceLimits(max_processes=64, max_memory_bytes=1 << 30, max_file_size_bytes=4096))
    got = {r["type"]: (r["soft"], r["hard"]) for r in config["process"]["rlimits"]}
    assert got == {"RLIMIT_NPROC": (64, 64), "RLIMIT_AS": (1 << 30, 1 << 30), "RLIMIT_FSIZE": (4096, 4096)}


def test_argv_and_environment_as_json_text() -> None:
    assert encode_argv(["a b", "é"]) == (["a b", "é"], False)
    items, decode = encode_argv([b"\xff%\\"])
    assert decode and items == ["\\377\\045\\134"] and all(ch.isascii() for ch in items[0])
    with pytest.raises(UsageError, match="NUL"):
        encode_argv(["a\0b"])
    with pytest.raises(UsageError, match="not valid UTF-8"):
        text_env({"X": "\udcff"})
    assert text_env({"A": "1=2"}) == ["A=1=2"]


def test_network_on_has_no_network_namespace_of_its_own() -> None:
    on = build_config(PLAN, identity=Identity(0, 0), limits=ResourceLimits(), network=True)
    assert {"type": "network"} not in on["linux"]["namespaces"]


def test_the_bind_limit_counts_exactly_the_binds_the_config_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = ("writable", "pin", "read-only", "placeholder", "mask-file", "mask-dir", "show")
    entries = [MountEntry(kind, f"/w/{kind}{n}", kind) for n in range(3) for kind in kinds]
    entries.append(MountEntry("private-tmp", "/tmp", "private", source="/var/tmp/s/tmp"))
    plan = MountPlan(tuple(entries))
    binds = sum(1 for m in oci_mounts(plan) if m["type"] == "bind")
    assert binds == 3 * 5 + 1
    monkeypatch.setattr(spec, "MAX_BINDS", binds)
    refuse_too_many_binds(plan)
    monkeypatch.setattr(spec, "MAX_BINDS", binds - 1)
    with pytest.raises(SandboxUnavailable, match=f"binds {binds} host paths"):
        refuse_too_many_binds(plan)
