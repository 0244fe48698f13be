"""The ``strom`` command."""

from strom.cli.main import main

__all__ = ["main"]
