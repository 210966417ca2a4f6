"""Two checks of the agent's answers beyond the paper: is its stated confidence borne out, and who made its errors?

**Calibration claim** (``calibration_stated_level``): a session that stops with its interval inside one level
states that level at the family confidence ``agent.confidence`` (0.9 in every profile). Per such in-family
session the *observed* arm is 1 when the stated level is the full benchmark's (run ``a``, the truth) and 0
otherwise; the *stated* arm is the constant confidence. The claim is a one-sided non-inferiority test of
observed against stated with margin :data:`CALIBRATION_MARGIN` at the cluster (model) level: with a
constant arm this is a test of the observed hit rate against ``confidence − margin``. The truth is an
independent finite draw of the benchmark, so its own noise counts against the agent (the interval speaks
about the pool it read, run ``b``; the summary also gives the hit rate against run b's level).

**Error attribution** (held-out family C, and in-family for comparison): an answer is *wrong* when its level
is not the level of the renderer's verdicts on the full benchmark (run a: what was really drawn). Each
scripted session is replayed on the same pool, seed and sample queues with the renderer's verdicts in place
of the tools' (oracle tools). A wrong answer that the oracle replay gets right is a **tool** error; one it
also gets wrong is a **sampling and stopping** error (perfect tools would not have saved it). For the
trained planner one more step comes first: a wrong answer where the scripted planner on the same tool
verdicts is right is a **trained planner** error. The split is sequential (planner → tools → sampling).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, unit_table
from paperworks.core.seeding import derive_seed
from paperworks.eval_agent.agent import Pool, run_agent
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.report import TOOLS_CONVERGED, TOOLS_LEARNED, TOOLS_OK
from paperworks.eval_agent.world import STRATA

CALIBRATION_MARGIN = 0.1
INSIDE = "interval inside one level"


def calibration_units(df: pd.DataFrame, confidence: float) -> dict[str, pd.DataFrame]:
    """Per in-family session that stopped inside one level: observed (its level = the truth's) vs stated (the confidence)."""
    a = df[(df["arm"] == "agent") & (df["role"] == "in_family") & (df["reason"] == INSIDE)]
    unit = a["dim"] + "/r" + a["repeat"].astype(str)
    rows = pd.concat([pd.DataFrame({"arm": "observed", "cluster": a["model"], "unit": unit, "value": a["exact"]}),
                      pd.DataFrame({"arm": "stated", "cluster": a["model"], "unit": unit, "value": float(confidence)})])
    return {"calibration_stated": unit_table(rows)} if len(a) else {}


def calibration_claim_specs(p: Params) -> list[ClaimSpec]:
    c = p.agent.confidence
    return [ClaimSpec("calibration_stated_level", f"when the agent stops with its interval inside one level it states that level at "
                      f"confidence {c:g}; the stated level is the full benchmark's at least that often (margin {CALIBRATION_MARGIN:g}; "
                      f"the stated arm is the constant {c:g})", "calibration_stated", "share of stated levels = truth level",
                      "observed", "stated", kind="non_inferiority", margin=CALIBRATION_MARGIN, unit="stated-level session",
                      cluster="model", preconditions=(TOOLS_OK, TOOLS_CONVERGED, TOOLS_LEARNED))]


def _pool(outcomes: pd.DataFrame, model: str, dim: str, column: str) -> Pool:
    g = outcomes[(outcomes["model"] == model) & (outcomes["run"] == "b") & (outcomes["dim"] == dim)].sort_values(["prompt", "sample"])
    return Pool(g["prompt"].to_numpy(), g["sample"].to_numpy(), g["stratum"].to_numpy(), g[column].to_numpy().astype(float))


def oracle_levels(outcomes: pd.DataFrame, df: pd.DataFrame, edges: dict[str, list[float]], p: Params, seed: int) -> pd.DataFrame:
    """Each scripted session replayed with the renderer's verdicts (same pool rows, seed and queues as ``report.run_sessions``)."""
    a = df[df["arm"] == "agent"]
    out = []
    for (model, dim), g in a.groupby(["model", "dim"]):
        pool = _pool(outcomes, model, dim, "truth")
        weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(pool.stratum)
        for rep in sorted(g["repeat"]):
            rng = np.random.default_rng(derive_seed(seed, "eval_agent", "session", model, dim, rep))
            s = run_agent(pool, weights, tuple(edges[dim]), p.agent, rng)
            out.append({"model": model, "dim": dim, "repeat": int(rep), "oracle_level": s.level, "oracle_n": s.n})
    return pd.DataFrame(out)


def attribution(df: pd.DataFrame, oracle: pd.DataFrame, rollouts: pd.DataFrame | None) -> dict:
    """Per role: how many sessions each planner got wrong (level ≠ the renderer's full-benchmark level) and why."""
    key = ["model", "dim", "repeat"]
    a = df[df["arm"] == "agent"].merge(oracle, on=key, how="left", validate="one_to_one")
    if a["oracle_level"].isna().any():
        raise ValueError("attribution: a scripted session has no oracle replay")
    if rollouts is not None:
        a = a.merge(rollouts[key + ["level"]].rename(columns={"level": "planner_level"}), on=key, how="left", validate="one_to_one")
    out = {}
    for role in ("in_family", "held_out"):
        d = a[a["role"] == role]
        truth = d["renderer_level"].to_numpy()
        scripted_ok, oracle_ok = d["level"].to_numpy() == truth, d["oracle_level"].to_numpy() == truth
        rec = {"sessions": int(len(d)),
               "scripted": {"right": int(scripted_ok.sum()), "tools": int((~scripted_ok & oracle_ok).sum()),
                            "sampling and stopping": int((~scripted_ok & ~oracle_ok).sum())},
               "oracle_tools_right": int(oracle_ok.sum())}
        if rollouts is not None and "planner_level" in d and d["planner_level"].notna().all():
            trained_ok = d["planner_level"].to_numpy() == truth
            rec["trained"] = {"right": int(trained_ok.sum()), "trained planner": int((~trained_ok & scripted_ok).sum()),
                              "tools": int((~trained_ok & ~scripted_ok & oracle_ok).sum()),
                              "sampling and stopping": int((~trained_ok & ~scripted_ok & ~oracle_ok).sum())}
        out[role] = rec
    return out


def calibration_extra(df: pd.DataFrame, confidence: float) -> dict:
    """Hit rates of the stated levels (in-family and held-out): against the truth (run a) and against run b's full level."""
    a = df[df["arm"] == "agent"].set_index(["model", "dim", "repeat"])
    full = df[df["arm"] == "full_rerun"].set_index(["model", "dim", "repeat"]).loc[a.index]
    out = {"stated_confidence": confidence, "margin": CALIBRATION_MARGIN}
    for role in ("in_family", "held_out"):
        m = ((a["role"] == role) & (a["reason"] == INSIDE)).to_numpy()
        n = int(m.sum())
        out[role] = {"stated": n, "level_is_truth": round(float(a["exact"][m].mean()), 4) if n else None,
                     "level_is_pool_level": round(float((a["level"][m] == full["level"][m]).mean()), 4) if n else None}
    return out
