"""`fleetval` command line: thin commands over the library (see app.py for the list)."""

from fleetval.cli.app import app

__all__ = ["app"]
