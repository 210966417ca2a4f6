"""One Prefect API for the whole test session (not one per test).

Prefect reads its settings when it is imported, so the environment is set here, before any
test module imports ``flows`` or ``prefect``: a throwaway ``PREFECT_HOME`` (tests never touch
the project's ``.prefect/`` or the user's ``~/.prefect``), a startup timeout fit for a loaded
machine, analytics off.
"""
from __future__ import annotations

import os
import tempfile

import pytest

_HOME = tempfile.mkdtemp(prefix="paperworks-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")


@pytest.fixture(scope="session")
def prefect_api() -> str:
    """A temporary Prefect API (SQLite in a temp dir) for this session; its URL is exported as
    ``PREFECT_API_URL`` so flows run in subprocesses (``python -m flows.pipeline``, workers) use
    it too instead of each starting their own."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    before = os.environ.get("PREFECT_API_URL")
    with prefect_test_harness(server_startup_timeout=180):
        url = PREFECT_API_URL.value()
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            if before is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = before
