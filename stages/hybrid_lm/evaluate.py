"""Stage hybrid_lm_evaluate: claims under the evidence standard, per-unit tables, summary, cost
blocks (tokens, FLOPs, CPU seconds per comparison), curve tables and figures."""
from __future__ import annotations

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.io import ArtifactError, atomic_path, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.hybrid_lm import DATA, METRICS, PLOTS, report
from paperworks.hybrid_lm.params import Params, run_name

RUN_KEYS = ("history", "heldout_loss", "recall", "probe", "cost", "params", "step_maxvio", "load_log")


def load_runs(p: Params) -> report.Runs:
    runs: report.Runs = {}
    for v in p.grid.variants:
        for s in p.grid.seeds:
            path = DATA / "runs" / f"{run_name(v, s)}.json"
            r = read_json(path)
            missing = [k for k in RUN_KEYS if k not in r]
            if missing or not r["history"]:
                raise ArtifactError(f"{path}: not a hybrid_lm run record (missing {missing or ['history rows']})")
            runs.setdefault(v, {})[s] = r
    return runs


@stage_main
def main() -> None:
    p = load_section("hybrid_lm", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    runs = load_runs(p)

    curves = report.curves_table(runs)
    recall = report.recall_table(runs)
    loads = report.expert_load_table(runs)
    write_text(PLOTS / "curves.csv", curves.to_csv(index=False))
    write_text(PLOTS / "recall.csv", recall.to_csv(index=False))
    write_text(PLOTS / "expert_load.csv", loads.to_csv(index=False))
    for name, fn in (("loss_curves.png", lambda t: report.plot_loss_curves(curves, t)),
                     ("recall_vs_context.png", lambda t: report.plot_recall(recall, report.kda_capacity(p), t)),
                     ("expert_load.png", lambda t: report.plot_expert_load(loads, t))):
        with atomic_path(PLOTS / name) as tmp:
            fn(tmp)

    tokens = next(iter(next(iter(runs.values())).values()))["cost"]["tokens"]
    units = report.unit_tables(p, runs, ev)
    claims = evaluate_claims(report.claim_specs(p, tokens), units, report.preconditions(p, runs, ev), ev, seed=seed,
                             track="hybrid_lm")
    write_unit_tables("hybrid_lm", units)
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "comparison_costs": report.comparison_costs(p, runs),
        "compute_multiplier_dense_over_hybrid": report.compute_multiplier(runs),
        "summary": report.summary(p, runs, recall),
        "grid": {"variants": p.grid.variants, "seeds": p.grid.seeds, "tokens_per_run": tokens,
                 "kda_head_capacity": report.kda_capacity(p), "recall_chance": 1.0 / p.corpus.n_values},
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}")


if __name__ == "__main__":
    main()
