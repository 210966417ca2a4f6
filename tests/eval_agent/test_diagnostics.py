"""Calibration claim (observed hit rate of stated levels vs the stated confidence) and the error attribution."""
import numpy as np
import pandas as pd

from paperworks.core.claims import EvidenceParams, evaluate_claims, precondition
from paperworks.eval_agent import diagnostics, report
from paperworks.eval_agent.params import AgentParams, Params, ToolParams, ZooParams
from tests.eval_agent.test_report import _outcomes


def _sessions(exact_by_model):
    rows = []
    for m, hits in exact_by_model.items():
        for rep, hit in enumerate(hits):
            rows.append({"model": m, "role": "in_family", "dim": "colour", "repeat": rep, "arm": "agent",
                         "reason": diagnostics.INSIDE, "exact": float(hit)})
            rows.append({"model": m, "role": "in_family", "dim": "count", "repeat": rep, "arm": "agent",
                         "reason": "cap", "exact": 0.0})  # a cap stop states no level: never in the table
    rows.append({"model": "C0", "role": "held_out", "dim": "colour", "repeat": 0, "arm": "agent", "reason": diagnostics.INSIDE, "exact": 0.0})
    return pd.DataFrame(rows)


def _claim(df, confidence=0.9):
    p = Params(tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(confidence=confidence))
    units = diagnostics.calibration_units(df, confidence)
    pre = [precondition(n, True) for n in (report.TOOLS_OK, report.TOOLS_CONVERGED, report.TOOLS_LEARNED)]
    return units, evaluate_claims(diagnostics.calibration_claim_specs(p), units, pre, EvidenceParams(), seed=0, track="eval_agent")[0]


def test_calibration_claim_compares_the_observed_hit_rate_with_the_stated_confidence():
    models = [f"m{i}" for i in range(8)]
    rng = np.random.default_rng(0)
    units, good = _claim(_sessions({m: list(rng.random(10) < 0.97) for m in models}))
    t = units["calibration_stated"]
    assert len(t) == 2 * 8 * 10 and set(t[t["arm"] == "stated"]["value"]) == {0.9}  # only interval stops, in-family
    assert good["method_mean"] > 0.9 and good["baseline_mean"] == 0.9 and good["verdict"].startswith("non-inferior")
    _, bad = _claim(_sessions({m: list(rng.random(10) < 0.4) for m in models}))  # a 0.9 statement borne out 40 % of the time
    assert bad["method_mean"] < 0.6 and not bad["verdict"].startswith("non-inferior")


def test_oracle_replay_uses_the_sessions_queues_and_attribution_splits_errors():
    df = _outcomes(np.random.default_rng(0))
    p = Params(zoo=ZooParams(dims=["colour"], prompts_per_dim=20, samples_per_prompt=4, n_population=5),
               tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(batch_size=8, max_rounds=5, repeats=3))
    s, edges, _ = report.run_sessions(df, p, seed=1)
    oracle = diagnostics.oracle_levels(df, s, edges, p, seed=1)
    ag = s[s["arm"] == "agent"].merge(oracle, on=["model", "dim", "repeat"])
    # tool == truth in this world: the oracle replay is the same session (same seed and queues), so the same level and n
    assert len(ag) == 9 and (ag["level"] == ag["oracle_level"]).all() and (ag["n"] == ag["oracle_n"]).all()

    # a hand-made case: truth level 2 everywhere; each combination of right/wrong answers lands in one category
    key = pd.DataFrame({"model": ["A0"] * 4 + ["C0"], "dim": ["colour"] * 5, "repeat": [0, 1, 2, 3, 0]})
    sessions = key.assign(arm="agent", role=["in_family"] * 4 + ["held_out"], renderer_level=2, level=[2, 1, 1, 2, 0])
    orc = key.assign(oracle_level=[2, 2, 1, 2, 2], oracle_n=8)
    roll = key.assign(level=[2, 2, 1, 0, 0])
    out = diagnostics.attribution(sessions, orc, roll)
    assert out["in_family"]["scripted"] == {"right": 2, "tools": 1, "sampling and stopping": 1}
    assert out["in_family"]["trained"] == {"right": 2, "trained planner": 1, "tools": 0, "sampling and stopping": 1}
    assert out["held_out"]["scripted"] == {"right": 0, "tools": 1, "sampling and stopping": 0}
    assert out["held_out"]["trained"]["tools"] == 1 and out["held_out"]["oracle_tools_right"] == 1
