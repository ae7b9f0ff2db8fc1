"""The conformance suite: a data-driven catalog of scenarios run per runner and mode."""

from dsh.cli.conformance.catalog import SCENARIOS, by_id
from dsh.cli.conformance.model import HostEnv, RunOutput, Scenario, ScenarioResult

__all__ = ["SCENARIOS", "HostEnv", "RunOutput", "Scenario", "ScenarioResult", "by_id"]
