"""The page's example sessions: chosen by rule, every round's samples recorded, the block and the contact sheet
follow the record, and a re-read that disagrees with the benchmark is refused."""
import numpy as np
import pandas as pd
import pytest

from paperworks.core.io import ArtifactError
from paperworks.eval_agent import page, report
from paperworks.eval_agent.params import AgentParams, Params, ToolParams, ZooParams
from paperworks.eval_agent.world import Parse
from tests.eval_agent.test_report import _outcomes


@pytest.fixture(scope="module")
def examples():
    df = _outcomes(np.random.default_rng(0))
    p = Params(zoo=ZooParams(dims=["colour"], prompts_per_dim=20, samples_per_prompt=4, n_population=5),
               tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(batch_size=8, max_rounds=5, repeats=3))
    s, edges, ex = report.run_sessions(df, p, seed=1)
    agent = s[s.arm == "agent"]
    rollouts = agent[["model", "dim", "repeat", "level", "n", "rounds", "reason"]].assign(
        decisions=6, invalid=1, retried_ok=0, fallbacks=1)
    log = [{"model": e["model"], "dim": e["dim"], "repeat": e["repeat"], "step": 2, "text": "think\n{bad", "why": "not a JSON object",
            "retry": "[1]", "retry_why": "not a JSON object", "applied": '{"action":"sample","n":[4,4]}', "outcome": "fallback"}
           for e in ex]
    return df, s, report.attach_planner(ex, rollouts, log)


def test_examples_record_every_round_and_match_the_sessions(examples):
    df, s, ex = examples
    assert ex and len({e["kind"] for e in ex}) == len(ex) and {e["kind"] for e in ex} <= set(report.EXAMPLE_KINDS)
    for e in ex:
        row = s[(s.arm == "agent") & (s.model == e["model"]) & (s.dim == e["dim"]) & (s.repeat == e["repeat"])].iloc[0]
        read = [x for r in e["rounds"] for x in r["samples"]]
        assert len(read) == e["samples"] == row["n"] == e["rounds"][-1]["n"]
        assert len({(x["prompt"], x["sample"]) for x in read}) == len(read)  # without replacement
        pool = df[(df.model == e["model"]) & (df.run == "b") & (df.dim == e["dim"])].set_index(["prompt", "sample"])
        assert all(pool.loc[(x["prompt"], x["sample"]), "tool"] == x["tool"] for x in read)
        assert e["rounds"][-1]["decision"] == e["stop"] and e["level"] in page.LEVELS
        assert e["planner"]["invalid"] == 1 and e["planner"]["refused"][0]["why"] == "not a JSON object"
    held = [e for e in ex if e["kind"] == "held-out family C"]
    assert held and held[0]["family"] == "C" and all(e["role"] == "in_family" for e in ex if e not in held)
    early = [e for e in ex if e["kind"] == "stopped early"]
    if early:  # the early stop is the in-family interval stop on the fewest samples
        stops = s[(s.arm == "agent") & (s.role == "in_family") & (s.reason == "interval inside one level")]
        assert early[0]["samples"] == stops["n"].min()


def test_block_and_contact_sheet_follow_the_record(examples):
    _, _, ex = examples
    images = {(x["prompt"], x["sample"]): np.full((64, 64, 3), 200, np.uint8) for e in ex for r in e["rounds"] for x in r["samples"]}
    readings = {page.slug(e): {(x["prompt"], x["sample"]): ("a red circle", "1× red circle", "1× red circle")
                               for r in e["rounds"] for x in r["samples"]} for e in ex}
    block = page.examples_block(ex, {page.slug(e): f"eval_agent/{page.slug(e)}.png" for e in ex}, readings, {page.slug(ex[0]): 1})
    for e in ex:
        assert f"### {e['kind']}: {e['model']}" in block and f"eval_agent/{page.slug(e)}.png" in block
        assert f"**Answer: {e['level']}**" in block and f"**{e['truth_level']}**" in block
        sheet = page.contact_sheet_for(e, images)
        assert sheet.size[1] >= len(e["rounds"]) * 64  # one row per round
    assert "1 re-drawn sample(s) read to another verdict" in block and "refused at step 2" in block
    n_round_rows = sum(len(e["rounds"]) for e in ex)
    assert sum(1 for ln in block.splitlines() if ln.startswith("| ") and " | +" in ln) == n_round_rows
    text = page.inject("intro\n" + page.START + "\nold\n" + page.END + "\nrest\n", block)
    assert "old" not in text and text.endswith(page.END + "\nrest\n") and page.inject(text, block) == text
    with pytest.raises(ValueError, match="markers"):
        page.inject("no markers", block)


def test_reread_mismatch_beyond_tolerance_is_an_artifact_error():
    assert page.check_reread([1] * 40, [1] * 39 + [0], "x") == 1
    with pytest.raises(ArtifactError, match="not from one run"):
        page.check_reread([1] * 10, [0] * 2 + [1] * 8, "x")
    with pytest.raises(ArtifactError):
        page.check_reread([1, 0], [1], "x")
    p = Parse(np.array([2, 0, 0, 0, 1]), np.array([0, -1, -1, -1, 1]), np.array([0.25, np.nan, np.nan, np.nan, 0.5]),
              np.array([0.5, np.nan, np.nan, np.nan, 0.5]), 3.14)
    assert page.describe(p) == "2× red circle @(0.25, 0.50); 1× blue cross @(0.50, 0.50); noise 3.1"


def test_calibration_reports_coverage_and_stated_levels(examples):
    _, s, _ = examples
    p = Params(zoo=ZooParams(dims=["colour"], prompts_per_dim=20, samples_per_prompt=4, n_population=5),
               tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(batch_size=8, max_rounds=5, repeats=3))
    c = report.calibration(s, p)
    assert c["look_confidence"] == pytest.approx(1 - 0.1 / 5)
    a = s[(s.arm == "agent") & (s.role == "in_family")]
    full = s[(s.arm == "full_rerun") & (s.role == "in_family")]
    cov = ((a["low"].to_numpy() <= full["estimate"].to_numpy()) & (full["estimate"].to_numpy() <= a["high"].to_numpy())).mean()
    assert c["in_family"]["covers_pool_score"] == round(float(cov), 4) and c["in_family"]["sessions"] == len(a)
    assert c["in_family"]["stated_level_sessions"] == int((a["reason"] == "interval inside one level").sum())
    assert isinstance(pd.Series(c["held_out"]).get("covers_truth_score"), float)


def test_measured_block_renders_the_metrics():
    row = {"exact": 0.7, "within_one": 0.95, "abs_error": 0.05, "samples": 68.8, "sample_share": 0.172}
    m = {"profile": "smoke", "summary": {"in_family/agent": row, "in_family/full_rerun": {**row, "samples": 400.0, "sample_share": 1.0},
                                         "agent_stops": {"cap": 3, "interval inside one level": 2},
                                         "tool_level_shift": {"in_family": 0.025, "held_out": 0.2},
                                         "calibration": {"look_confidence": 0.99, "family_confidence": 0.9,
                                                         **{r: {"sessions": 5, "covers_pool_score": 1.0, "covers_truth_score": 0.8,
                                                                "stated_level_sessions": 0, "stated_level_is_truth": None,
                                                                "stated_level_is_rerun_level": None} for r in ("in_family", "held_out")}}},
         "modes": {"needs_per_repeat": 20, "agent": {"comparison_accuracy": 0.8, "recommendation_hit": 0.6, "recommendation_regret": 0.01}},
         "planner": {"refusals": {"wrong total": {"first_try": 4, "retry": 1}}}}
    block = page.measured_block(m)
    assert "| in_family/agent | 0.700 | 0.950 | 0.050 | 68.8 | 17.2% |" in block
    assert "| in_family/full_rerun |" in block and "cap: 3, interval inside one level: 2" in block
    assert "| held_out | 5 | 1.000 | 0.800 | 0 | – | – |" in block and "| agent | 0.800 | 0.600 | 0.0100 |" in block
    assert "wrong total 4 first tries / 1 retries" in block
    text = page.inject_between("a\n" + page.MEASURED_START + "\nold\n" + page.MEASURED_END + "\n", block,
                               page.MEASURED_START, page.MEASURED_END)
    assert "old" not in text and "17.2%" in text


def test_measured_block_renders_open_queries_calibration_claim_and_attribution():
    row = {"exact": 0.5, "within_one": 0.9, "abs_error": 0.08, "samples": 20.0}
    m = {"profile": "smoke", "summary": {"agent_stops": {}, "tool_level_shift": {}},
         "open_queries": {"in_family/agent": row, "in_family/full_rerun": {**row, "samples": 110.0},
                          "evidence_in_family": {"failing_shown": 40, "renderer_also_fails": 38, "precision": 0.95},
                          "evidence_held_out": {"failing_shown": 0, "renderer_also_fails": 0, "precision": None}},
         "calibration": {"stated_confidence": 0.9, "margin": 0.1,
                         "in_family": {"stated": 12, "level_is_truth": 0.75, "level_is_pool_level": 0.9167},
                         "held_out": {"stated": 0, "level_is_truth": None, "level_is_pool_level": None}},
         "attribution": {"in_family": {"sessions": 10, "scripted": {"right": 7, "tools": 1, "sampling and stopping": 2},
                                       "trained": {"right": 6, "trained planner": 2, "tools": 1, "sampling and stopping": 1}},
                         "held_out": {"sessions": 4, "scripted": {"right": 1, "tools": 3, "sampling and stopping": 0}}}}
    record = {"queries": {"colour:red": {"query": "How well does it keep red?", "prompts": 22, "samples": 110,
                                         "edges": [0.0, 0.3, 0.4, 0.5, 0.6, 1.0]},
                          "count:cross": {"query": "How well does it count crosses?", "prompts": 0, "skipped": "no prompt"}},
              "per_query": {"colour:red": {"agent_exact": 0.6, "agent_within_one": 1.0, "samples": 52.5}}}
    block = page.measured_block(m, record)
    assert "| in_family/full_rerun | 0.500 | 0.900 | 0.080 | 110.0 |" in block
    assert "in_family 38 of 40 (0.950)" in block and "held_out 0 of" not in block
    assert "| How well does it keep red? | colour:red | 22 | 110 | 0.30 · 0.40 · 0.50 · 0.60 | 0.600 | 1.000 | 52.5 |" in block
    assert "| How well does it count crosses? | count:cross | 0 |" in block
    assert "at least 0.8 of the time" in block and "| in_family | 12 | 0.750 | 0.917 |" in block
    assert "| in_family | trained | 10 | 6 | 2 | 1 | 1 |" in block and "| held_out | scripted | 4 | 1 | – | 3 | 0 |" in block
    assert "| held_out | trained |" not in block
