"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import dvc

METHODS = {"fusion", "fusion_no_anchor", "fusion_zscore", "fusion_no_agreement", "fusion+consensus",
           "fusion+cross", "fusion+cloze", "fusion+verify", "backbone_cnn", "backbone_resnet", "backbone_vit",
           "view_full", "view_structured", "view_appearance", "view_action", "view_object", "view_scene"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "person_search_*")
    metrics = json.loads((smoke_repo / "metrics/person_search.json").read_text())
    statements = [c["statement"] for c in metrics["claims"]]
    assert any("best single backbone" in s for s in statements) and any("consensus" in s for s in statements)
    for c in metrics["claims"]:
        assert c["verdict"] in ("method better", "baseline better", "unresolved")
        lo, hi = c["diff_ci95"]
        assert lo <= c["diff"] <= hi and c["n"] == metrics["n_test_queries"]
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
