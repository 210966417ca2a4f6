"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import assert_claims_meet_standard, dvc

METHODS = {"fusion", "fusion_no_anchor", "fusion_zscore", "fusion_no_agreement", "fusion+consensus",
           "fusion+cross", "fusion+cloze", "fusion+verify", "backbone_cnn", "backbone_resnet", "backbone_vit",
           "view_full", "view_structured", "view_appearance", "view_action", "view_object", "view_scene"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "person_search_*")
    metrics = json.loads((smoke_repo / "metrics/person_search.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "person_search", smoke_repo)}
    assert {"fusion_vs_best_backbone", "consensus_vs_fusion"} <= set(claims)
    for c in claims.values():  # one training run: every test query is its own cluster
        assert c["units"]["cluster"] is None and c["units"]["n_clusters"] == metrics["n_test_queries"]
    results = pd.read_csv(smoke_repo / "plots/person_search/results.csv")
    assert METHODS <= set(results["method"])
    assert results[["map@10", "r@1", "r@5", "r@10"]].apply(lambda c: c.between(0, 1)).all().all()
    assert (results["r@1"] <= results["r@5"] + 1e-9).all() and (results["r@5"] <= results["r@10"] + 1e-9).all()
    sheet = Image.open(smoke_repo / "plots/person_search/contact_sheet.png")
    assert sheet.format == "PNG" and sheet.size[0] > 300
    for name in ("cnn", "resnet", "vit"):
        assert (smoke_repo / f"plots/person_search/live_encoder_{name}/metrics.json").exists()
    # a second repro has nothing to do: every stage is cached
    out = dvc(smoke_repo, "repro", "--glob", "person_search_*").stdout
    assert "didn't change" in out or "up to date" in out.lower()
