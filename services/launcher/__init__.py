"""Launcher tools: the Python SDK (`from services.launcher import Client`) and the `gangway` commands over it."""

from services.launcher.client import Client, JobStatus, LauncherError

__all__ = ["Client", "JobStatus", "LauncherError"]
