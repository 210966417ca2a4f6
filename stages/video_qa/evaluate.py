"""Stage video_qa_evaluate: for every training draw, temperature and τ on dev and every policy on test; then
preconditions, claims over the draws, the accuracy-vs-τ curve and the reliability diagram."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.io import atomic_path, read_json, read_parquet, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.video_qa import report
from paperworks.video_qa.artifacts import PLOTS, seed_infer
from paperworks.video_qa.params import Params

METRICS = Path("metrics/video_qa.json")


@stage_main
def main() -> None:
    p = load_section("video_qa", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    evals, checks = {}, {}
    for s in p.seeds:
        df = read_parquet(seed_infer(s) / "results.parquet", report.RESULT_SCHEMA)
        evals[s] = report.evaluate(df, p, derive_seed(seed, "video_qa", "random_router", s))
        checks[s] = read_json(seed_infer(s) / "check_threshold.json")
    curves = {name: live_curve(path) for name, path in report.training_curves(p.seeds).items()}

    curve = report.accuracy_vs_tau_all(evals, p)
    write_text(PLOTS / "accuracy_vs_tau.csv", curve.to_csv(index=False, float_format="%.6g"))
    with atomic_path(PLOTS / "accuracy_vs_tau.png") as tmp:
        report.plot_accuracy_vs_tau(curve, evals, p, tmp)
    rel = report.reliability_frame(evals, p)
    write_text(PLOTS / "reliability.csv", rel.to_csv(index=False, float_format="%.6g"))
    with atomic_path(PLOTS / "reliability.png") as tmp:
        report.plot_reliability(rel, tmp)

    units = report.question_units(evals)
    pre = report.preconditions(evals, p, curves, ev)
    claims = evaluate_claims(report.claim_specs(p), units, pre, ev, seed=seed, track="video_qa")
    write_unit_tables("video_qa", units)
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(evals, p),
        "gate": report.gate_block(evals, p),
        "preconditions": pre,
        "relevance_check": report.relevance_check_block(checks),
        "training_runs": len(p.seeds),
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
