"""The insurance smoke profile end to end through DVC."""
from __future__ import annotations

import json

import pytest

from tests.conftest import dvc


@pytest.mark.integration
def test_smoke_pipeline_through_dvc(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "insurance_*")
    metrics = json.loads((smoke_repo / "metrics/insurance.json").read_text())
    assert metrics["profile"] == "smoke"
    statements = [c["statement"] for c in metrics["claims"]]
    assert len(statements) == 3 and any("ndcg@3" in s for s in statements) and any("spearman" in s for s in statements)
    for c in metrics["claims"]:
        assert c["verdict"] in ("method better", "baseline better", "unresolved")
        assert c["diff_ci95"][0] <= c["diff"] <= c["diff_ci95"][1]
    assert len(metrics["config_vs_base"]) == 4  # smoke grid: 2 backbones x 2 losses
    assert 0.0 <= metrics["label_audit"]["agreement"] <= 1.0
    card = metrics["data_card"]
    assert set(card["queries_per_intent"]) == {"direct", "symptom", "coverage"}
    assert set(card["relevance_histogram"]) == {"0", "1", "2", "3"}
    for name in ("zeroshot_curve.csv", "zeroshot_curve.png", "grid.csv", "results_by_intent.csv", "tuned_seeds.csv"):
        assert (smoke_repo / "plots/insurance" / name).stat().st_size > 0
    assert (smoke_repo / "models/insurance/best_cross_encoder").is_dir()
    # a second repro has nothing to do: every stage is cached
    out = dvc(smoke_repo, "status", "--json").stdout
    assert not any(k.startswith("insurance_") for k in json.loads(out or "{}"))
