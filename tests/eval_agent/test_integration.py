"""The track's smoke profile end to end through DVC, in a temporary copy of the repository."""
import json
import sys

import pandas as pd
import pytest
from PIL import Image

from tests.conftest import assert_claims_meet_standard, dvc, run

HEADLINE = {"agent_vs_full_benchmark", "agent_vs_random_subset", "agent_vs_first_n"}


@pytest.mark.integration
def test_smoke_pipeline(smoke_repo):
    dvc(smoke_repo, "repro", "--glob", "eval_agent_*")
    metrics = json.loads((smoke_repo / "metrics/eval_agent.json").read_text())
    claims = {c["id"]: c for c in assert_claims_meet_standard(metrics, "eval_agent", smoke_repo)}
    assert {c for c, r in claims.items() if r["role"] == "headline"} == HEADLINE
    units = pd.read_csv(smoke_repo / "metrics/units/eval_agent/exact.csv")
    # sessions = model × dimension × repeat, models as clusters: 4 in-family models × 5 dims × 2 repeats per arm
    assert set(units["arm"]) == {"agent", "random_subset", "first_n", "full_rerun"}
    assert units.groupby("arm").size().unique().tolist() == [40] and units["cluster"].nunique() == 4
    assert claims["agent_vs_random_subset"]["units"]["cluster"] == "model"
    s = metrics["summary"]
    for role in ("in_family", "held_out"):  # the controls read exactly the agent's number of samples
        assert s[f"{role}/random_subset"]["samples"] == s[f"{role}/agent"]["samples"] == s[f"{role}/first_n"]["samples"]
        assert s[f"{role}/agent"]["samples"] <= 16 < s[f"{role}/full_rerun"]["samples"] + 1
    names = {p["name"] for p in metrics["preconditions"]}
    assert any(n.startswith("tools read the known families") for n in names)
    assert set(metrics["tool_accuracy"]) == {"A", "B", "C"}
    levels = metrics["levels"]
    assert set(levels) == {"colour", "presence", "count", "spatial", "quality"} and all(len(e) == 6 for e in levels.values())
    examples = json.loads((smoke_repo / "plots/eval_agent/example_sessions.json").read_text())["sessions"]
    assert examples and all(e["rounds"] and e["samples"] == e["rounds"][-1]["n"] for e in examples)
    assert all(e["stop"] in ("interval inside one level", "cap", "pool exhausted") for e in examples)
    assert {"round cap", "held-out family C"} <= {e["kind"] for e in examples}
    assert all(sum(len(r["samples"]) for r in e["rounds"]) == e["samples"] and "planner" in e for e in examples)
    # the page: every example's samples drawn again from their seeds and read again by the tools, into the doc and PNGs
    out = run([sys.executable, "-m", "paperworks.eval_agent.page"], cwd=smoke_repo).stdout
    assert f"{len(examples)} example sessions" in out
    doc = (smoke_repo / "docs/tracks/eval_agent.md").read_text()
    block = doc.split("<!-- examples:start -->")[1].split("<!-- examples:end -->")[0]
    for e in examples:
        assert f"### {e['kind']}: {e['model']}" in block
    measured = doc.split("<!-- measured:start -->")[1].split("<!-- measured:end -->")[0]
    assert "(profile: smoke)" in measured and "| in_family/agent |" in measured and "Calibration" in measured and "Modes" in measured
    sheets = sorted((smoke_repo / "docs/tracks/eval_agent").glob("*.png"))
    assert len(sheets) == len(examples) and all(Image.open(s).format == "PNG" for s in sheets)
    # comparison 3: the trained planner on the scripted agent's own sessions, in-family and held-out
    # two planner training draws in smoke: the draw is the cluster, each plays every session
    for table, n in (("planner_within_one", 40), ("planner_within_one_heldout", 10)):
        u = pd.read_csv(smoke_repo / f"metrics/units/eval_agent/{table}.csv")
        assert set(u["arm"]) == {"planner", "agent"} and u.groupby("arm").size().tolist() == [2 * n, 2 * n]
        assert set(u["cluster"]) == {"seed_0", "seed_1"} and (u.groupby(["arm", "cluster"]).size() == n).all()
    for c in ("planner_vs_scripted", "planner_vs_scripted_heldout"):
        assert claims[c]["kind"] == "non_inferiority" and claims[c]["units"]["cluster"] == "seed"
    assert metrics["training_runs"] == 2
    pl = metrics["planner"]
    assert pl["draws"] == 2 and set(pl["by_seed"]) == {"0", "1"}
    assert pl["records"]["train"] > 0 and pl["records"]["heldout"] > 0
    for role in ("in_family", "held_out"):
        r = pl[role]
        assert r["invalid"] == r["retried_ok"] + r["fallbacks"] and r["decisions"] > 0
        assert r["valid_action_rate"] == round(1 - r["invalid"] / r["decisions"], 4)
    refusals = pl["refusals"]  # every refused first try and every refused retry, by kind
    assert sum(v["first_try"] for v in refusals.values()) == pl["in_family"]["invalid"] + pl["held_out"]["invalid"]
    assert sum(v["retry"] for v in refusals.values()) == pl["in_family"]["fallbacks"] + pl["held_out"]["fallbacks"]
    cal = s["calibration"]
    assert all(0 <= cal[role]["covers_pool_score"] <= 1 for role in ("in_family", "held_out"))
    valid = next(c for c in metrics["preconditions"] if c["name"] == "the trained planner's first-try actions are valid")
    assert valid["passed"] == (valid["value"] >= 0.9)  # 30 smoke steps: the planner rarely emits a valid action
    if not valid["passed"]:
        assert claims["planner_vs_scripted"]["verdict"].startswith("not tested")
    # open-ended queries, the calibration claim and the error attribution (exploratory)
    assert {"open_query_vs_full_benchmark", "open_query_vs_random_subset", "calibration_stated_level"} <= set(claims)
    assert all(claims[c]["role"] == "exploratory" for c in ("open_query_vs_full_benchmark", "calibration_stated_level"))
    record = json.loads((smoke_repo / "plots/eval_agent/open_queries.json").read_text())
    asked = [(k, q) for k, q in record["queries"].items() if q["prompts"] > 0]
    assert len(record["queries"]) == 14 and asked
    ou = pd.read_csv(smoke_repo / "metrics/units/eval_agent/open_within_one.csv")
    assert set(ou["arm"]) == {"agent", "random_subset", "full_rerun"} and ou["cluster"].nunique() == 4
    assert ou.groupby("arm").size().unique().tolist() == [4 * len(asked) * 2]  # models × answered queries × repeats
    at = metrics["attribution"]
    for role, n in (("in_family", 40), ("held_out", 10)):
        assert at[role]["sessions"] == n and sum(at[role]["scripted"].values()) == n and sum(at[role]["trained"].values()) == n
    assert "Open-ended queries" in measured and "Errors (level" in measured and "Stated confidence" in measured
    # the callable: a question in words, answered by a live session on freshly drawn samples
    key, q = asked[-1]
    out = run([sys.executable, "-m", "paperworks.eval_agent.service", q["query"], "--model", "A0"], cwd=smoke_repo).stdout
    ans = json.loads(out)
    assert ans["model"] == "A0" and ans["slice"] == key and ans["edges"] == q["edges"] and ans["level"] in ("Very Low", "Low", "Medium", "High", "Very High")
    assert 0 < ans["cost"]["samples"] <= ans["cost"]["slice_samples"] and ans["failing_total"] >= len(ans["evidence"])
    img = Image.open(smoke_repo / "plots/eval_agent/agreement.png")
    assert img.format == "PNG" and img.size[0] > 300
    out = dvc(smoke_repo, "repro", "--glob", "eval_agent_*").stdout  # a second repro has nothing to do
    assert "didn't change" in out or "up to date" in out.lower()
