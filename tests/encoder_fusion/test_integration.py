"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json
import shutil
import sys

import pandas as pd
import pytest

from tests.conftest import assert_claims_meet_standard, dvc, run

FUSIONS = {"foundation", "parallel", "parallel_query", "cascade"}

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
    assert set(vqa["arm"]) == FUSIONS and vqa["cluster"].nunique() == 2  # smoke: 2 seeds
    assert claims["cascade_vs_foundation"]["units"]["cluster"] == "seed"
    # every fusion answered the same test questions under every seed (paired units)
    assert vqa.groupby("arm")["unit"].nunique().nunique() == 1
    tau = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/panel_tau.csv")
    assert set(tau["arm"]) == {"roi", "entity_f1", "label_f1", "bleu", "rouge_l", "embedding"} and tau["value"].between(-1, 1).all()
    plot = pd.read_csv(smoke_repo / "plots/encoder_fusion/vqa_accuracy.csv")
    assert set(plot["fusion"]) == FUSIONS and plot["accuracy"].between(0, 1).all()
    assert claims["cascade_vs_parallel_query"]["role"] == "exploratory" and claims["cascade_vs_parallel_query"]["units"]["cluster"] == "seed"
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
    assert set(rep["arm"]) == FUSIONS and rep["cluster"].nunique() == 2
    assert rep.groupby(["arm", "cluster"])["unit"].apply(frozenset).nunique() == 1 and rep["value"].between(0, 1).all()
    assert claims["report_cascade_vs_foundation"]["units"]["cluster"] == "seed"
    assert claims["report_cascade_vs_parallel"]["metric"] == "report RoI-F1"
    assert {"every report decoder converged", "every report decoder learned"} <= names
    reports = pd.read_parquet(smoke_repo / "data/encoder_fusion/decoder/reports.parquet")
    assert (reports["n_matched"] + reports["n_missed"] + reports["n_hallucinated"] >= 0).all() and reports["reference"].str.len().gt(0).all()
    assert set(metrics["report_decoder"]["fusions"]) == FUSIONS
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
    # beyond the paper: abstention at a dev-fitted threshold and the accuracy drop under degradation, per fusion × seed
    sel = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/selective_accuracy.csv")
    # unit tables keep only the fusions a reliability claim reads (abstention fusions, cascade, foundation); the plot
    # tables below keep every fusion
    claimed = {"foundation", "cascade"}
    assert set(sel["arm"]) == {f"{f}_{k}" for f in claimed for k in ("answered", "all")}
    assert (sel.groupby("arm")["unit"].count().loc[[f"{f}_answered" for f in claimed]].to_numpy()
            <= sel.groupby("arm")["unit"].count().loc[[f"{f}_all" for f in claimed]].to_numpy()).all()
    drop = pd.read_csv(smoke_repo / "metrics/units/encoder_fusion/degradation_drop.csv")
    assert set(drop["arm"]) == claimed and drop["value"].isin([-1, 0, 1]).all()
    assert {"abstention_raises_accuracy_cascade", "selective_cascade_vs_foundation", "degradation_cascade_vs_foundation"} <= set(claims)
    assert set(metrics["reliability"]["fusions"]) == FUSIONS and metrics["reliability"]["mean_abs_pixel_change"] > 0
    for name in ("reliability.csv", "selective_accuracy.csv", "degradation.csv"):
        assert len(pd.read_csv(smoke_repo / "plots/encoder_fusion" / name))
    out = dvc(smoke_repo, "repro", "--glob", "encoder_fusion_*").stdout  # a second repro has nothing to do
    assert "didn't change" in out or "up to date" in out.lower()


@pytest.mark.integration
def test_reliability_stage_detects_mismatched_artifacts(smoke_repo):
    """A head file that is not the one the predictions came from, or encoders that do not match the cached
    tokens, stop the reliability stage with a message naming the file (run in place, outside DVC)."""
    dvc(smoke_repo, "repro", "encoder_fusion_reliability")
    heads = smoke_repo / "data/encoder_fusion/vqa/seed_1/heads"
    models = smoke_repo / "models/encoder_fusion/seed_1"  # seed 1's heads run on seed 1's encoders
    cmd = [sys.executable, "-m", "stages.encoder_fusion.reliability"]
    backup = smoke_repo.parent / "backup.safetensors"
    try:
        shutil.copy(heads / "cascade-1.safetensors", backup)
        (heads / "cascade-1.safetensors").write_bytes((heads / "cascade-1.safetensors").read_bytes()[:-64])
        proc = run(cmd, smoke_repo, check=False)
        assert proc.returncode == 2 and "cascade-1.safetensors" in proc.stdout + proc.stderr
    finally:
        shutil.copy(backup, heads / "cascade-1.safetensors")
    try:
        shutil.copy(models / "specialist_path.safetensors", backup)
        shutil.copy(models / "specialist_xray.safetensors", models / "specialist_path.safetensors")
        proc = run(cmd, smoke_repo, check=False)
        assert proc.returncode == 2 and "path: re-encoding the clean test images differs" in proc.stdout + proc.stderr
    finally:
        shutil.copy(backup, models / "specialist_path.safetensors")
