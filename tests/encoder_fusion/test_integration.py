"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json

import pandas as pd
import pytest

from tests.conftest import assert_claims_meet_standard, dvc

HEADLINE = {"cascade_vs_foundation", "cascade_vs_parallel", "roi_metric_vs_entity_f1"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "encoder_fusion_*")
    metrics = json.loads((smoke_repo / "metrics/encoder_fusion.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "encoder_fusion", smoke_repo)}
    assert {c for c, r in claims.items() if r["role"] == "headline"} == HEADLINE
    assert metrics["synthetic"] and metrics["panel"]["simulated"] is True
    names = {p["name"] for p in metrics["preconditions"]}
    assert {"specialists beat the foundation on small-lesion detection", "every trained model converged",
            "finding tagger accurate on held-out paraphrased sentences"} <= names
    vqa = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/vqa_accuracy.csv")
    assert set(vqa["arm"]) == {"foundation", "parallel", "cascade"} and vqa["cluster"].nunique() == 2  # smoke: 2 seeds
    assert claims["cascade_vs_foundation"]["units"]["cluster"] == "seed"
    # every fusion answered the same test questions under every seed (paired units)
    assert vqa.groupby("arm")["unit"].nunique().nunique() == 1
    tau = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/panel_tau.csv")
    assert set(tau["arm"]) == {"roi", "entity_f1", "label_f1", "bleu", "rouge_l", "embedding"} and tau["value"].between(-1, 1).all()
    plot = pd.read_csv(smoke_repo / "plots/encoder_fusion/vqa_accuracy.csv")
    assert set(plot["fusion"]) == {"foundation", "parallel", "cascade"} and plot["accuracy"].between(0, 1).all()
    assert set(metrics["summary"]["final_gates_mean"]) == {"gate_xray", "gate_path"}
    # comparison 2 (CT-like volumes): every arm × seed answered the same test questions; thin-lesion recall
    # is read on presence questions only; the precondition records the sampled slices' miss rate
    vol = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/volume_vqa_accuracy.csv")
    assert set(vol["arm"]) == {"anchored", "sampled", "encoder3d"} and vol["cluster"].nunique() == 2
    assert vol.groupby(["arm", "cluster"])["unit"].apply(frozenset).nunique() == 1
    thin = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/thin_lesion_recall.csv")
    assert thin["unit"].str.contains("|presence|", regex=False).all() and set(thin["unit"]) < set(vol["unit"])
    assert {"anchored_vs_sampled_3d", "anchored_vs_sampled_thin_recall", "anchored_vs_encoder3d_3d"} <= set(claims)
    assert claims["anchored_vs_sampled_thin_recall"]["metric"] == "small-lesion recall"
    pre = {p["name"]: p for p in metrics["preconditions"]}
    world = metrics["volume"]["world"]
    assert pre["sampled slices miss thin lesions"]["value"] == pytest.approx(world["thin_missed_share"], abs=1e-4)
    assert world["sampled_slices"] == [0, 4, 7] and 0 <= world["thin_missed_share"] <= 1
    assert set(metrics["volume"]["arms"]) == {"anchored", "sampled", "encoder3d"}
    # the report decoder: every fusion × seed wrote a report for every test case, scored by the RoI scorer
    rep = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/report_roi_f1.csv")
    assert set(rep["arm"]) == {"foundation", "parallel", "cascade"} and rep["cluster"].nunique() == 2
    assert rep.groupby(["arm", "cluster"])["unit"].apply(frozenset).nunique() == 1 and rep["value"].between(0, 1).all()
    assert claims["report_cascade_vs_foundation"]["units"]["cluster"] == "seed"
    assert claims["report_cascade_vs_parallel"]["metric"] == "report RoI-F1"
    assert {"every report decoder converged", "every report decoder learned"} <= names
    reports = pd.read_parquet(smoke_repo / "data/encoder_fusion/decoder/reports.parquet")
    assert (reports["n_matched"] + reports["n_missed"] + reports["n_hallucinated"] >= 0).all() and reports["reference"].str.len().gt(0).all()
    assert set(metrics["report_decoder"]["fusions"]) == {"foundation", "parallel", "cascade"}
    # exploratory: instruction retention (mixed vs domain only) and tool use vs none, paired units per seed
    comp = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/instruction_compliance.csv")
    assert set(comp["arm"]) == {"mixed", "domain_only"} and comp["cluster"].nunique() == 2 and comp["value"].isin([0, 1]).all()
    assert comp.groupby(["arm", "cluster"])["unit"].apply(frozenset).nunique() == 1
    assert comp["unit"].str.rsplit("|", n=1).str[1].isin(["header", "bullets", "count"]).all()
    tool = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/tool_report_roi_f1.csv")
    assert set(tool["arm"]) == {"tool", "none"} and tool.groupby(["arm", "cluster"])["unit"].apply(frozenset).nunique() == 1
    assert {"instruction_retention_mixed_vs_domain_only", "tool_use_vs_none"} <= set(claims)
    assert claims["tool_use_vs_none"]["role"] == "exploratory" and claims["tool_use_vs_none"]["units"]["cluster"] == "seed"
    assert {"instruction tuning taught the formats", "segmentation tool reads the test cases"} <= names
    assert 0 <= metrics["explore"]["tool_entity_f1_test"] <= 1
    out = dvc(smoke_repo, "repro", "--glob", "encoder_fusion_*").stdout  # a second repro has nothing to do
    assert "didn't change" in out or "up to date" in out.lower()
