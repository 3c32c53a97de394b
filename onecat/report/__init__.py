"""Fleet benchmark report (see command.py for the CLI)."""

from onecat.report.command import register

__all__ = ["register"]
