"""Stage eval_agent_evaluate: reference levels, agent sessions and controls, preconditions, claims."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.io import atomic_path, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.core.io import ArtifactError
from paperworks.eval_agent import diagnostics, queries, report
from paperworks.eval_agent.artifacts import PLOTS, planner_dir, read_outcomes, read_rollouts, read_t2v, read_zoo
from paperworks.eval_agent.inputs import read_actions, read_tool_accuracy
from paperworks.eval_agent.params import Params

METRICS = Path("metrics/eval_agent.json")


def _summed_refusals(tables) -> dict:
    """The planner draws' refused actions per kind, summed (first tries and retries)."""
    out: dict[str, dict[str, int]] = {}
    for table in tables:
        for kind, v in table.items():
            k = out.setdefault(kind, {"first_try": 0, "retry": 0})
            k["first_try"] += int(v["first_try"])
            k["retry"] += int(v["retry"])
    return dict(sorted(out.items()))


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    outcomes = read_outcomes()
    tools = read_tool_accuracy()
    sessions, edges, examples = report.run_sessions(outcomes, p, seed)
    units = report.session_units(sessions)
    mode_tables, modes = report.mode_units(sessions, p.zoo.dims, seed)
    units.update(mode_tables)
    # every planner training draw plays the scripted agent's sessions; the first draw's rollouts are the examples' and the
    # error attribution's (one planner per session there)
    rollouts = {s: read_rollouts(planner_dir(s)) for s in p.planner.seeds}
    actions = {s: read_actions(r, planner_dir(s)) for s, r in rollouts.items()}
    first = p.planner.seeds[0]
    planner = pd.concat([report.planner_sessions(sessions, r).assign(planner_seed=s) for s, r in rollouts.items()], ignore_index=True)
    examples = report.attach_planner(examples, rollouts[first], actions[first]["invalid_log"])
    units.update(report.planner_units(planner))
    _, prompts = read_zoo()
    open_df, open_info = queries.open_sessions(outcomes, prompts, p, seed)
    if len(open_df):
        units.update(queries.open_units(open_df))
    units.update(diagnostics.calibration_units(sessions, p.agent.confidence))
    oracle = diagnostics.oracle_levels(outcomes, sessions, edges, p, seed)
    attribution = diagnostics.attribution(sessions, oracle, rollouts[first])
    pre = report.preconditions(outcomes, live_curve(report.CURVE), p, ev)
    pre += report.planner_preconditions(planner, {s: live_curve(report.planner_curve(s)) for s in p.planner.seeds}, p, ev)
    specs = (report.claim_specs(p) + report.mode_claim_specs(p) + report.planner_claim_specs(p)
             + queries.open_claim_specs(p) + diagnostics.calibration_claim_specs(p))
    suite, t2v_outcomes = read_t2v()
    if suite["enabled"] != p.t2v.enabled:
        raise ArtifactError(f"data/eval_agent/t2v/suite.json: enabled={suite['enabled']} but eval_agent.t2v.enabled={p.t2v.enabled}; "
                            "rerun eval_agent_t2v_bench")
    t2v = None
    if p.t2v.enabled:  # the text-to-video suite (paper profile): same sessions, tables and claim machinery, own ids
        from paperworks.eval_agent import t2v_report  # imports the tools (torch): only when the suite is on

        t2v_sessions, t2v_edges = t2v_report.sessions(t2v_outcomes, p, seed)
        units.update(t2v_report.units(t2v_sessions))
        pre += t2v_report.preconditions(t2v_outcomes, p)
        specs += t2v_report.claim_specs(p)
        t2v = t2v_report.summary(t2v_sessions, t2v_outcomes, t2v_edges, suite, p)
    claims = evaluate_claims(specs, units, pre, ev, seed=seed, track="eval_agent")
    write_unit_tables("eval_agent", units)
    frame = report.plot_frame(sessions)
    write_text(PLOTS / "agreement.csv", frame.to_csv(index=False, float_format="%.6g"))
    with atomic_path(PLOTS / "agreement.png") as tmp:
        report.plot_agreement(frame, tmp)
    write_json(PLOTS / "example_sessions.json", {"sessions": examples})
    open_summary = queries.open_summary(open_df, open_info)
    write_json(PLOTS / "open_queries.json", {"queries": open_summary["queries"], "per_query": open_summary.get("per_query", {})})
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(sessions, p),
        "modes": modes,
        "open_queries": {k: v for k, v in open_summary.items() if k not in ("queries", "per_query")},
        "calibration": diagnostics.calibration_extra(sessions, p.agent.confidence),
        "attribution": {**attribution, "planner_seed": first},
        "planner": {**report.planner_summary(planner), "records": actions[first]["records"],
                    "refusals": _summed_refusals(a["refusals"] for a in actions.values()),
                    "by_seed": {str(s): {"final_heldout_loss": a["final_heldout_loss"], "decisions": a["decisions"],
                                         "invalid": a["invalid"]} for s, a in actions.items()}},
        "levels": edges,
        "tool_accuracy": tools["per_family"],
        "preconditions": pre,
        "training_runs": len(p.planner.seeds),   # planner draws; the tools are one draw
        **({"t2v": t2v} if t2v is not None else {}),
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
