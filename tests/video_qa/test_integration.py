"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import assert_claims_meet_standard, dvc

HEADLINE = {"cader_vs_global", "cader_vs_always_stage2", "margin_vs_random_router"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "video_qa_*")
    metrics = json.loads((smoke_repo / "metrics/video_qa.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "video_qa", smoke_repo)}
    assert {c for c, r in claims.items() if r["role"] == "headline"} == HEADLINE
    units = pd.read_csv(smoke_repo / "metrics/units/video_qa/accuracy.csv")
    seeds = metrics["training_runs"]
    assert seeds >= 2 and set(units["cluster"]) == {f"seed_{s}" for s in range(seeds)}  # smoke: seeds [0, 1]
    for c in claims.values():  # every draw answers the test questions: the interval is over training draws
        assert c["units"]["cluster"] == "seed" and c["units"]["n_clusters"] == seeds
        assert c["units"]["n_units"] == seeds * metrics["gate"]["n_test_questions"]
    assert set(metrics["gate"]["by_seed"]) == {str(s) for s in range(seeds)}
    names = {p["name"] for p in metrics["preconditions"]}
    assert {"every trained model converged", "oracle window gains on local questions",
            "cropping costs on global questions"} <= names
    s = metrics["summary"]
    assert s["global"]["exit_share"] == 1.0 and s["always_stage2"]["exit_share"] == 0.0
    assert s["always_stage2"]["frames"] > s["global"]["frames"] and s["always_stage2"]["cpu_ms"] > s["global"]["cpu_ms"]
    for router in ("router_max_prob", "router_entropy", "router_random"):  # routers compared at the same exit share
        assert s[router]["exit_share"] == s["cader"]["exit_share"]
    curve = pd.read_csv(smoke_repo / "plots/video_qa/accuracy_vs_tau.csv")
    assert {"dev", "test"} == set(curve["split"]) and curve["exit_share"].between(0, 1).all()
    assert set(curve["seed"]) == set(range(seeds))
    for _, test in curve[curve["split"] == "test"].groupby("seed"):
        assert test.sort_values("tau")["exit_share"].is_monotonic_decreasing
    for name in ("accuracy_vs_tau.png", "reliability.png", "seed_0/relevance_map.png", "seed_1/relevance_map.png"):
        img = Image.open(smoke_repo / "plots/video_qa" / name)
        assert img.format == "PNG" and img.size[0] > 300
    assert (smoke_repo / "metrics/units/video_qa/accuracy.csv").exists()
    out = dvc(smoke_repo, "repro", "--glob", "video_qa_*").stdout  # a second repro has nothing to do
    assert "didn't change" in out or "up to date" in out.lower()
