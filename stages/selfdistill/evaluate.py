"""Stage selfdistill_evaluate: claims (SR-OPSD vs reverse-KL OPSD over seeds), summary, cost,
curve tables and the entropy/accuracy-vs-step figures (paper Figures 2 and 3)."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.io import ArtifactError, atomic_path, read_json, write_json, write_text
from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill import report
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import DATA, PLOTS

METRICS = Path("metrics/selfdistill.json")
BASE_LOSS = PLOTS / "live_base/plots/metrics/loss.tsv"


def check_run(path: Path, res) -> dict:
    if not isinstance(res, dict) or not res.get("runs") or any("history" not in r or not r["history"] for r in res["runs"]):
        raise ArtifactError(f"{path}: not a run record (needs 'runs' with non-empty 'history')")
    return res


@stage_main
def main() -> None:
    p = load_section("selfdistill", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    names = [*p.methods, "grpo"]
    runs = {m: check_run(DATA / "runs" / f"{m}.json", read_json(DATA / "runs" / f"{m}.json")) for m in names}
    sweep = [check_run(f, read_json(f)) for f in sorted((DATA / "sweep").glob("*.json"))]
    base = read_json(DATA / "base_history.json")

    curves = report.curves_table(runs)
    write_text(PLOTS / "curves.csv", curves.to_csv(index=False))
    sweep_df = report.sweep_table(sweep) if sweep else None
    if sweep_df is not None:
        write_text(PLOTS / "sweep.csv", sweep_df.to_csv(index=False))
    for key, label, name, title in [
        ("entropy", "token entropy of own samples (nats)", "entropy_vs_step.png", "Entropy vs step (cf. paper Fig. 2)"),
        ("acc", "held-out greedy accuracy", "accuracy_vs_step.png", "Accuracy vs step (cf. paper Fig. 3)"),
        ("teacher_acc", "self-teacher accuracy with privileged context", "teacher_accuracy_vs_step.png", "Self-teacher (privileged) accuracy"),
        ("entropy_sum", "entropy on the multi-solution family", "entropy_sum_vs_step.png", "Entropy vs step, sum family"),
    ]:
        with atomic_path(PLOTS / name) as tmp:
            report.plot_curves(curves, key, label, tmp, title)

    base_last = base["history"][-1]
    units = report.seed_units(curves)
    claims = evaluate_claims(report.claim_specs(p), units, report.preconditions(p, curves, live_curve(BASE_LOSS), ev), ev,
                             seed=seed, track="selfdistill")
    write_unit_tables("selfdistill", units)
    metrics = {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(runs),
        "base": {"n_params": base["n_params"], "acc": round(base_last["acc"], 4), "teacher_acc": round(base_last["teacher_acc"], 4),
                 "entropy": round(base_last["entropy"], 4)},
        "profile_steps": p.opsd.steps,
        "seeds": len(p.opsd.seeds),
    }
    if sweep_df is not None:
        best = sweep_df.groupby(["alpha", "rho"])["acc"].mean()
        metrics["sweep_best"] = {"alpha": float(best.idxmax()[0]), "rho": float(best.idxmax()[1]), "acc": round(float(best.max()), 4),
                                 "steps": int(sweep_df["steps"].max())}
    write_json(METRICS, metrics)
    for c in claims:
        print(f"{c['id']}: {c['verdict']}")


if __name__ == "__main__":
    main()
