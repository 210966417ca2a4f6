"""The frame tests share the root conftest's session-wide Prefect API (`prefect_api`, in `tests/conftest.py`,
so that the frame and mol tests on one xdist worker use one server, not two)."""
