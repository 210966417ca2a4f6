"""The flow divides the cores among its parallel stages (flows.pipeline.stage_threads)."""
from __future__ import annotations

import os

from flows.pipeline import stage_threads


def test_two_lanes_on_two_cores_give_each_stage_one_thread_and_restore(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv("PAPERWORKS_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with stage_threads(2):
        assert os.environ["PAPERWORKS_THREADS"] == "1" and os.environ["OMP_NUM_THREADS"] == "1"
    assert "PAPERWORKS_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ
    with stage_threads(1):
        assert os.environ["PAPERWORKS_THREADS"] == "2"
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    with stage_threads(3):
        assert os.environ["PAPERWORKS_THREADS"] == "5"


def test_a_user_setting_wins_and_a_remote_cluster_is_left_alone(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("PAPERWORKS_THREADS", "2")
    with stage_threads(2):
        assert os.environ["PAPERWORKS_THREADS"] == "2"
    monkeypatch.delenv("PAPERWORKS_THREADS")
    with stage_threads(2, local=False):
        assert "PAPERWORKS_THREADS" not in os.environ
