"""The whole-DAG tests wait for a smoke group another xdist worker started and has not finished
(two `dvc repro` runs of one stage race in DVC's run cache), and do not wait otherwise."""
from __future__ import annotations

from types import SimpleNamespace

import tests.conftest as shared


def _fake_session(monkeypatch, tmp_path, worker: str):
    base = tmp_path / f"popen-{worker}"
    base.mkdir()
    config = SimpleNamespace(_tmp_path_factory=SimpleNamespace(getbasetemp=lambda: base))
    monkeypatch.setattr(shared, "XDIST_WORKER", worker)
    monkeypatch.setattr(shared, "_CONFIG", config)
    return tmp_path / "smoke-groups"


def test_waits_for_a_group_another_worker_started(monkeypatch, tmp_path) -> None:
    markers = _fake_session(monkeypatch, tmp_path, "gw0")
    markers.mkdir()
    (markers / "smoke-b.started.gw1").touch()
    assert shared.wait_for_other_smoke_groups(timeout_s=0.3, poll_s=0.05) >= 0.3
    (markers / "smoke-b.done.gw1").touch()
    assert shared.wait_for_other_smoke_groups(timeout_s=5, poll_s=0.05) < 1


def test_own_and_unstarted_groups_are_not_waited_for(monkeypatch, tmp_path) -> None:
    markers = _fake_session(monkeypatch, tmp_path, "gw0")
    markers.mkdir()
    (markers / "smoke-a.started.gw0").touch()  # this worker's own group, still running (the caller)
    assert shared.wait_for_other_smoke_groups(timeout_s=5, poll_s=0.05) < 1


def test_group_done_marker_after_its_last_test(monkeypatch, tmp_path) -> None:
    markers = _fake_session(monkeypatch, tmp_path, "gw1")
    monkeypatch.setattr(shared, "_GROUP_LEFT", {"smoke-b": 2})
    monkeypatch.setattr(shared, "smoke_group", lambda nodeid: "smoke-b")
    item = SimpleNamespace(nodeid="tests/mol/test_integration.py::t")
    shared.pytest_runtest_setup(item)
    assert (markers / "smoke-b.started.gw1").exists()
    shared.pytest_runtest_teardown(item, None)
    assert not (markers / "smoke-b.done.gw1").exists()
    shared.pytest_runtest_teardown(item, None)
    assert (markers / "smoke-b.done.gw1").exists()
