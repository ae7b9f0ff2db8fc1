"""The Landlock runner: Landlock + no_new_privs + seccomp on a restricted spawner thread."""

from dsh.runners.landlock.runner import LandlockRunner

__all__ = ["LandlockRunner"]
