"""The text-to-video stages through DVC on a tiny overlay of the smoke profile, then switched off again.

Smoke keeps the suite off (its stages would cost more than smoke's budget allows), so this test turns it on in
its own temporary copy: 3 dimensions × 4 prompts × 1 sample of 6-frame clips, one generator per family, an agent
cap of 4 clips per dimension. The copy is taken from the shared smoke copy, so the eval_agent stages that read
none of the changed keys (zoo, tools, bench) come with their lock entries and DVC skips them; only the stages
that read `agent` or `t2v` run here.
"""
import json
import resource
import shutil

import pandas as pd
import pytest
import yaml

from tests.conftest import assert_claims_meet_standard, dvc

T2V_CLAIMS = {"t2v_agent_vs_full_benchmark", "t2v_agent_vs_random_subset", "t2v_agent_vs_first_n", "t2v_heldout_agent_vs_full_benchmark"}
DIMS = ["temporal_flickering", "object_action", "appearance_style"]


def _set(repo, **t2v):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["eval_agent"]["agent"].update(batch_size=2, max_rounds=2)
    params["eval_agent"]["t2v"].update(t2v)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.mark.integration
def test_t2v_stages_on_a_tiny_overlay(smoke_repo, tmp_path):
    dvc(smoke_repo, "repro", "--glob", "eval_agent_*")  # a no-op after the track's own smoke test
    repo = tmp_path / "repo"
    shutil.copytree(smoke_repo, repo, symlinks=True)
    _set(repo, enabled=True, n_per_family=1, n_held_out=1, n_population=5, dims=DIMS, prompts_per_dim=4, samples_per_prompt=1, n_frames=6)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    first = dvc(repo, "repro", "eval_agent_evaluate").stdout
    assert "Running stage 'eval_agent_bench'" not in first and "Running stage 'eval_agent_t2v_bench'" in first
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"t2v overlay: {after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime:.1f} CPU-s for the track's stages")
    suite = json.loads((repo / "data/eval_agent/t2v/suite.json").read_text())
    assert suite["enabled"] and suite["dims"] == DIMS and suite["clips_per_model_run"] == 12
    out = pd.read_parquet(repo / "data/eval_agent/t2v/outcomes.parquet")
    # 4 in-domain + 3 held-out generators × 2 runs + 5 population × 1 run, 12 clips each
    assert len(out) == (7 * 2 + 5) * 12 and set(out["family"]) == {"V0", "V1", "V2", "V3", "H0", "H1", "H2"}
    metrics = json.loads((repo / "metrics/eval_agent.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "eval_agent", repo)}
    assert T2V_CLAIMS <= set(claims) and all(claims[c]["role"] == "exploratory" for c in T2V_CLAIMS)
    assert sum(c["role"] == "headline" for c in claims.values()) == 3
    t2v = metrics["t2v"]
    assert t2v["dims"] == DIMS and set(t2v["levels"]) == set(DIMS) and all(len(e) == 6 for e in t2v["levels"].values())
    assert set(t2v["tool_accuracy"]) == {"V0", "V1", "V2", "V3", "H0", "H1", "H2"}
    s = t2v["summary"]
    assert s["in_family/agent"]["samples"] == s["in_family/random_subset"]["samples"] <= 4 == s["in_family/full_rerun"]["samples"]
    u = pd.read_csv(repo / "metrics/units/eval_agent/t2v_exact.csv")
    assert u["cluster"].nunique() == 4 and u.groupby("arm").size().unique().tolist() == [4 * 3 * 2]  # models × dims × repeats
    assert any(p["name"] == "tools read the in-domain video families' clips like the renderer" for p in metrics["preconditions"])
    # switched off again: the stage writes a labelled empty suite, and the metrics carry no T2V claim
    _set(repo, enabled=False)
    dvc(repo, "repro", "eval_agent_evaluate")
    suite = json.loads((repo / "data/eval_agent/t2v/suite.json").read_text())
    assert suite == {"enabled": False, "note": suite["note"]} and "paper" in suite["note"]
    assert len(pd.read_parquet(repo / "data/eval_agent/t2v/outcomes.parquet")) == 0
    metrics = json.loads((repo / "metrics/eval_agent.json").read_text())
    assert "t2v" not in metrics and not T2V_CLAIMS & {c["id"] for c in metrics["claims"]}
    assert_claims_meet_standard(metrics, "eval_agent", repo)
