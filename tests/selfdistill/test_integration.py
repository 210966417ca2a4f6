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
    assert len(claims) >= 5
    # the smoke budget is far below the collapse regime: the headline claims must say they were not tested
    assert claims["sr_opsd_keeps_entropy"]["verdict"].startswith("not tested: long budget")
    assert "GRPO does not end below its starting validation accuracy" in {r["name"] for r in claims["sr_opsd_vs_grpo"]["preconditions"]}
    assert {"reverse_kl", "sr_opsd", "grpo"} == set(metrics["summary"])
    assert metrics["grpo_tuning"]["chosen_lr"] == 0.0003
    for name in ("entropy_vs_step.png", "accuracy_vs_step.png", "kl_ref_vs_step.png", "curves.csv", "sweep.csv", "grpo_tuning.csv"):
        assert (smoke_repo / "plots/selfdistill" / name).stat().st_size > 0
    # one stage per (method, seed); every method probed at the same steps
    steps = set()
    for method in ("reverse_kl", "sr_opsd", "grpo"):
        for seed in (0, 1):
            run = json.loads((smoke_repo / f"data/selfdistill/runs/{method}/seed{seed}.json").read_text())
            steps.add(tuple(h["step"] for h in run["history"]))
            assert (smoke_repo / f"models/selfdistill/runs/{method}/seed{seed}.safetensors").exists()
            assert (smoke_repo / f"plots/selfdistill/live_{method}_s{seed}/metrics.json").exists()
            if method != "grpo":
                assert "teacher_acc" in run["history"][-1]  # the self-teacher's privileged accuracy is logged
            else:
                assert "train_zero_reward_groups" in run["history"][-1]
    assert steps == {(0, 2, 4)}
    # everything is up to date afterwards: the DAG declares what the stages read and write
    status = dvc(smoke_repo, "status", "--json").stdout
    assert not any(k.startswith("selfdistill") for k in json.loads(status or "{}"))
