"""The three sandbox modes and their ordering by permissiveness."""

from __future__ import annotations

from enum import StrEnum

from dsh.sandbox.errors import ConfigError


class SandboxMode(StrEnum):
    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    DANGER_FULL_ACCESS = "danger-full-access"

    @property
    def rank(self) -> int:
        """0 for the strictest mode; a higher rank is strictly more permissive."""
        return _RANK[self]

    def is_more_permissive_than(self, other: SandboxMode) -> bool:
        return self.rank > other.rank

    @property
    def constrains(self) -> bool:
        """True for modes a runner must enforce."""
        return self is not SandboxMode.DANGER_FULL_ACCESS

    @classmethod
    def parse(cls, value: str | SandboxMode, *, field: str = "mode") -> SandboxMode:
        if isinstance(value, SandboxMode):
            return value
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ConfigError(
                f"{field}: unknown sandbox mode {value!r}; use one of: {choices}"
            ) from None

    def __str__(self) -> str:
        return self.value


_RANK = {
    SandboxMode.READ_ONLY: 0,
    SandboxMode.WORKSPACE_WRITE: 1,
    SandboxMode.DANGER_FULL_ACCESS: 2,
}
