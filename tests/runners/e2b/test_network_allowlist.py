"""A network allowlist on E2B: E2B's own egress rules, by a degradation the user accepts.

The envd double has no E2B API (debug mode makes no API call), so it cannot
hold network rules: there the policy is refused and nothing runs.  With the
API, the rules go to ``Sandbox.create``; what the SDK sends for them is
checked with the SDK's own request builder and API model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsh.runners.e2b import E2BRunner
from dsh.runners.e2b.network import create_args
from dsh.sandbox.errors import SandboxUnavailable
from dsh.sandbox.net_rules import parse

from tests.runners.e2b.conftest import Envd, need_sdk
from tests.runners.e2b.helpers import policy, run


def test_debug_mode_refuses_an_allowlist_and_runs_nothing(envd: Envd, workspace: Path) -> None:
    runner = E2BRunner({"sandbox_url": envd.url})
    limited = policy("workspace-write", workspace, network_allowlist=parse(["pkgs.example.org"]))
    try:
        with pytest.raises(SandboxUnavailable, match=r"debug mode .* cannot apply network rules; nothing ran"):
            run(runner, ["touch", str(workspace / "ran")], limited)
    finally:
        runner.close()
    assert not (workspace / "ran").exists()


def test_with_the_api_the_allowlist_is_a_degradation_and_deny_is_refused(
        monkeypatch: pytest.MonkeyPatch, workspace: Path) -> None:
    need_sdk()
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_not_a_real_key")
    live = E2BRunner()
    limited = policy("workspace-write", workspace, network_allowlist=parse(["pkgs.example.org", "*.example.com"]))
    report = live.enforcement(limited)
    assert report.level == "partial" and report.degradations == ("e2b-network-by-sni",)
    assert "SNI" in report.reasons_for("e2b-network-by-sni")[0]
    assert live.refuses_network_of(limited) is None
    assert live.explain(limited).network.startswith("allowlist: E2B's egress rules (deny_out 0.0.0.0/0, allow_out "
                                                    "pkgs.example.org, *.example.com)")
    with pytest.raises(SandboxUnavailable, match="e2b-network-by-sni"):  # not accepted: the gate refuses
        live.prepare(["true"], limited, cwd=str(workspace), env={})
    denying = policy("workspace-write", workspace,
                     network_allowlist=parse(["*.example.com"], ["uploads.example.com"]))
    refusal = live.refuses_network_of(denying)
    assert refusal is not None and "allow_out wins over it" in refusal and "uploads.example.com" in refusal


def test_the_sdk_sends_deny_all_and_the_allowed_names(workspace: Path) -> None:
    need_sdk()
    from e2b.api.client.models.sandbox_network_config import SandboxNetworkConfig
    from e2b.sandbox.sandbox_api import build_network_config

    limited = policy("workspace-write", workspace, network_allowlist=parse(["pkgs.example.org", "*.example.com"]))
    args = create_args(limited, debug=False)
    assert set(args) == {"network"}  # never allow_internet_access beside it
    body = build_network_config(args["network"])
    assert body is not None
    sent = SandboxNetworkConfig(**body).to_dict()
    # Older SDKs also send the model's default for public URLs; nothing else may ride along.
    assert sent.pop("allowPublicTraffic", True) is True
    assert sent == {"allowOut": ["pkgs.example.org", "*.example.com"], "denyOut": ["0.0.0.0/0"]}
    # Off, on, and debug mode: the switch alone, as before.
    assert create_args(policy("read-only", workspace), debug=False) == {"allow_internet_access": False}
    assert create_args(policy("read-only", workspace, network=True), debug=False) == {"allow_internet_access": True}
    assert create_args(limited, debug=True) == {"allow_internet_access": False}
