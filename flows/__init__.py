"""Prefect flows over the DVC pipeline.

Importing this package sets the environment every Prefect process of the project needs,
before ``prefect`` reads its settings (so a plain ``python -m flows.pipeline`` gets it, not
only ``make``):

- ``PREFECT_HOME`` under the project (``.prefect/``, git-ignored): processes of other
  projects, or of the same user elsewhere, never share its SQLite database ("database is
  locked").
- ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=180``: the temporary API takes 7-30 s
  to start on a loaded 2-core laptop; Prefect's default of 20 s failed runs at load 3-17.
- Analytics off (``PREFECT_SERVER_ANALYTICS_ENABLED=false``, ``DO_NOT_TRACK=1``, and
  ``DVC_NO_ANALYTICS=1`` for the DVC subprocesses). Besides sending nothing, this keeps the
  temporary server's telemetry service from writing to a fresh SQLite database while the
  server migrates it, the source of a 130-line "database is locked" traceback.

Values already in the environment win (a user may point ``PREFECT_HOME`` elsewhere).
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def prefect_environment(project_root: Path = PROJECT_ROOT) -> dict[str, str]:
    """The variables this project sets for Prefect and DVC (see the module docstring)."""
    return {
        "PREFECT_HOME": str(project_root / ".prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "DVC_NO_ANALYTICS": "1",
    }


def configure_environment(environ: MutableMapping[str, str] = os.environ, project_root: Path = PROJECT_ROOT) -> None:
    for key, value in prefect_environment(project_root).items():
        environ.setdefault(key, value)


configure_environment()
