"""macOS Seatbelt runner: ``sandbox-exec -p <SBPL> -D...`` around the exact argv."""

from dsh.runners.seatbelt.runner import SeatbeltRunner

__all__ = ["SeatbeltRunner"]
