"""Stage selfdistill_evaluate: claims (over paired seeds), summary, cost, curve tables and the
entropy/accuracy-vs-step figures over the full budget (paper Figures 2 and 3), plus the
diagnostics (KL to the base, learning rate, GRPO's all-zero reward groups)."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.io import ArtifactError, atomic_path, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.selfdistill import report
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import DATA, PLOTS, run_file, tune_file

METRICS = Path("metrics/selfdistill.json")
BASE_LOSS = PLOTS / "live_base/plots/metrics/loss.tsv"
FIGURES = [
    ("entropy", "token entropy of own samples (nats)", "entropy_vs_step.png", "Entropy vs step (cf. paper Fig. 2)"),
    ("acc", "validation greedy accuracy", "accuracy_vs_step.png", "Accuracy vs step (cf. paper Fig. 3)"),
    ("teacher_acc", "self-teacher accuracy with privileged context", "teacher_accuracy_vs_step.png", "Self-teacher (privileged) accuracy"),
    ("entropy_sum", "entropy on the multi-solution family", "entropy_sum_vs_step.png", "Entropy vs step, sum family"),
    ("kl_ref", "token KL(student ‖ base) on own samples", "kl_ref_vs_step.png", "Distance from the base (validation)"),
    ("train_zero_reward_groups", "share of all-zero reward groups", "grpo_zero_reward_groups.png", "GRPO reward sparsity (training)"),
]


def check_run(path: Path, res) -> dict:
    if not isinstance(res, dict) or not res.get("history") or "steps" not in res or "final" not in res:
        raise ArtifactError(f"{path}: not a run record (needs 'history', 'steps' and 'final')")
    return res


@stage_main
def main() -> None:
    p = load_section("selfdistill", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    runs = {m: [check_run(run_file(m, s), read_json(run_file(m, s))) for s in p.opsd.seeds] for m in [*p.opsd.run, "grpo"]}
    tuning = {lr: read_json(tune_file(lr)) for lr in p.grpo.lrs}
    chosen_lr, tune_table = report.pick_grpo_lr(tuning)
    sweep = [read_json(f) for f in sorted((DATA / "sweep").glob("*.json"))]
    base = read_json(DATA / "base_history.json")

    curves = report.curves_table(runs)
    write_text(PLOTS / "curves.csv", curves.to_csv(index=False))
    write_text(PLOTS / "grpo_tuning.csv", report.curves_table({f"grpo_lr{lr:g}": [r] for lr, r in sorted(tuning.items())})
               .to_csv(index=False))
    sweep_df = report.sweep_table(sweep) if sweep else None
    if sweep_df is not None:
        write_text(PLOTS / "sweep.csv", sweep_df.to_csv(index=False))
    for key, label, name, title in FIGURES:
        with atomic_path(PLOTS / name) as tmp:
            report.plot_curves(curves, key, label, tmp, title)

    base_last = base["history"][-1]
    units = report.seed_units(runs)
    base_val_acc = [h["acc"] for h in base["history"] if "acc" in h]
    claims = evaluate_claims(report.claim_specs(p), units, report.preconditions(p, runs, live_curve(BASE_LOSS), ev, base_val_acc), ev,
                             seed=seed, track="selfdistill")
    write_unit_tables("selfdistill", units)
    metrics = {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(runs),
        "grpo_tuning": {"chosen_lr": chosen_lr, "table": [{k: (round(float(v), 4) if k != "lr" else float(v)) for k, v in r.items()}
                                                          for r in tune_table.to_dict("records")]},
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
