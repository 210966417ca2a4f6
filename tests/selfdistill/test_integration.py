"""The whole selfdistill smoke profile through DVC: outputs, metrics, claims, plots."""
from __future__ import annotations

import json

import pytest

from tests.conftest import assert_claims_meet_standard, dvc

pytestmark = pytest.mark.integration


def test_smoke_pipeline_through_dvc(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "selfdistill_*")
    metrics = json.loads((smoke_repo / "metrics/selfdistill.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "selfdistill", smoke_repo)}
    assert len(claims) >= 4
    # the smoke budget is far below the collapse regime: the headline claims must say they were not tested
    assert claims["sr_opsd_keeps_entropy"]["verdict"].startswith("not tested: long budget")
    assert {"reverse_kl", "forward_kl", "sr_opsd", "frozen_teacher", "grpo"} <= set(metrics["summary"])
    for name in ("entropy_vs_step.png", "accuracy_vs_step.png", "curves.csv", "sweep.csv"):
        assert (smoke_repo / "plots/selfdistill" / name).stat().st_size > 0
    runs = json.loads((smoke_repo / "data/selfdistill/runs/sr_opsd.json").read_text())
    assert [r["seed"] for r in runs["runs"]] == [0, 1, 2]
    assert "teacher_acc" in runs["runs"][0]["history"][-1]  # the self-teacher's privileged accuracy is logged
    assert (smoke_repo / "models/selfdistill/runs/sr_opsd/seed0.safetensors").exists()
    assert (smoke_repo / "plots/selfdistill/live_sr_opsd/metrics.json").exists()
    # everything is up to date afterwards: the DAG declares what the stages read and write
    status = dvc(smoke_repo, "status", "--json").stdout
    assert not any(k.startswith("selfdistill") for k in json.loads(status or "{}"))
