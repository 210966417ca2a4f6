"""The text-to-video suite through the image suite's machinery: sessions, per-unit tables, preconditions, claims.

Every number comes from the same functions as the image side (``report.run_sessions`` → the scripted agent, the
equal-sample random subset and first-N controls, the full rerun; ``report.levels`` → the five-level tables from the
population's full-benchmark scores; ``report.session_units``; ``report.tool_agreement``; ``report.summary``), called
with the video suite's dimensions and sub-aspects. Tables and claims carry the prefix ``t2v_``; the claims are
exploratory (the track's three headline claims are the image suite's).
"""
from __future__ import annotations

import pandas as pd

from paperworks.core.claims import ClaimSpec
from paperworks.eval_agent import report
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.video import IN_DOMAIN, VSTRATA

PREFIX = "t2v_"
T2V_TOOLS_OK = "tools read the in-domain video families' clips like the renderer"


def sessions(outcomes: pd.DataFrame, p: Params, seed: int) -> tuple[pd.DataFrame, dict]:
    df, edges, _ = report.run_sessions(outcomes, p, seed, dims=list(p.t2v.dims), strata=VSTRATA)
    return df, edges


def units(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {PREFIX + k: v for k, v in report.session_units(df).items()}


def preconditions(outcomes: pd.DataFrame, p: Params) -> list[dict]:
    """Tool verdict = renderer verdict per in-domain family and dimension (the tools' convergence is the image side's)."""
    return [report.tool_agreement(outcomes, IN_DOMAIN, T2V_TOOLS_OK, p.claims.min_tool_accuracy)]


def claim_specs(p: Params) -> list[ClaimSpec]:
    cap = p.agent.batch_size * p.agent.max_rounds
    full = p.t2v.prompts_per_dim * p.t2v.samples_per_prompt
    m = p.claims.within_one_margin
    tools = (T2V_TOOLS_OK, report.TOOLS_CONVERGED, report.TOOLS_LEARNED)
    common = dict(unit="session", cluster="model", preconditions=tools)
    return [
        ClaimSpec("t2v_agent_vs_full_benchmark", f"text-to-video: the agent (≤ {cap} of {full} clips per dimension) places a model "
                  f"within one of the full suite's five levels as often as a full-benchmark rerun (margin {m:g})",
                  PREFIX + "within_one", "within_one", "agent", "full_rerun", kind="non_inferiority", margin=m, **common),
        ClaimSpec("t2v_agent_vs_random_subset", "text-to-video: the agent's level is exactly right more often than a random subset "
                  "of the same size", PREFIX + "exact", "exact level agreement", "agent", "random_subset", **common),
        ClaimSpec("t2v_agent_vs_first_n", "text-to-video: the agent's level is exactly right more often than the first N prompts of "
                  "the file (same N)", PREFIX + "exact", "exact level agreement", "agent", "first_n", **common),
        ClaimSpec("t2v_heldout_agent_vs_full_benchmark", f"text-to-video, held-out families H0–H2: the agent stays within one level as "
                  f"often as a full rerun (margin {m:g})", PREFIX + "within_one_heldout", "within_one", "agent", "full_rerun",
                  kind="non_inferiority", margin=m, unit="session", cluster="model",
                  preconditions=(report.TOOLS_CONVERGED, report.TOOLS_LEARNED)),
    ]


def tool_accuracy(outcomes: pd.DataFrame) -> dict:
    """Tool verdict = renderer verdict per family and dimension (every non-population sample), for the metrics."""
    d = outcomes[outcomes["role"] != "population"]
    acc = d.assign(ok=(d["tool"] == d["truth"]).astype(float)).groupby(["family", "dim"])["ok"].mean()
    return {f: {dim: round(float(v), 4) for (ff, dim), v in acc.items() if ff == f} for f in sorted(set(d["family"]))}


def summary(df: pd.DataFrame, outcomes: pd.DataFrame, edges: dict, suite: dict, p: Params) -> dict:
    full = p.t2v.prompts_per_dim * p.t2v.samples_per_prompt
    ag = df[(df["arm"] == "agent") & (df["role"] == "in_family")]
    return {"dims": list(p.t2v.dims), "clips_per_model_run": suite["clips_per_model_run"], "n_frames": suite["n_frames"],
            "models": {role: sorted(df[df["role"] == role]["model"].unique().tolist()) for role in ("in_family", "held_out")},
            "agent_clips_per_model": round(float(ag.groupby(["model", "repeat"])["n"].sum().mean()), 1) if len(ag) else None,
            "summary": report.summary(df, p, full=full), "levels": edges, "tool_accuracy": tool_accuracy(outcomes),
            "per_dim": report.plot_frame(df).to_dict(orient="records")}
