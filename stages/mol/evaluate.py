"""Stage mol_evaluate: per-(capability, seed) success and contamination, whole-conversation success
per routing policy, preconditions, claims, the success plot and the dev-loss curves; the versioned loop on the
mixture of LoRA (``mol_versions``) vs on one monolithic LoRA (``mol_versions_monolith``): forgetting per
(capability, seed) and per-cycle retention of every capability on every earlier accepted suite."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.io import atomic_path, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.mol import report
from paperworks.mol.artifacts import BASE_HISTORY, PLOTS, ROUTER, loop_dir, read_seed_results
from paperworks.mol.params import Params

METRICS = Path("metrics/mol.json")


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    results = {s: read_seed_results(s) for s in p.adapters.seeds}
    routes = read_json(ROUTER / "routes.json")["routes"]
    base_history = read_json(BASE_HISTORY)
    rates = report.success_rates(results)
    conv = report.conversation_success(results, routes)
    tables = report.unit_tables(rates, conv)
    pre = report.preconditions(p, rates, results, base_history, ev)
    # every loop run: versions.seed's (the serving one) and the replicates', both layouts (mixture, monolith)
    loop_seeds = [p.versions.seed, *p.versions.replicate_seeds]
    dirs = {s: {arm: loop_dir(arm, s, p.versions.seed) for arm in report.LOOP_ARMS} for s in loop_seeds}
    runs = {s: {arm: (read_json(d / "lineage.json"), read_json(d / "answers.json")) for arm, d in by.items()} for s, by in dirs.items()}
    lineage, answers = runs[p.versions.seed]["mol"]
    for name in ("versions_new_suite", "versions_v0_suite"):
        parts = [t[name] for s in loop_seeds if name in (t := report.version_tables(runs[s]["mol"][1], seed=s))]
        if parts:
            tables[name] = pd.concat(parts, ignore_index=True)
    pre += report.loop_preconditions({s: runs[s]["mol"][0] for s in loop_seeds}, ev)
    earlier = report.earlier_suites(answers, p.versions.cycles[-1].shift)
    forgetting = [report.forgetting_table({arm: ans for arm, (_, ans) in runs[s].items()}, earlier, s) for s in loop_seeds]
    if all(forgetting):
        tables["forgetting"] = pd.concat([f["forgetting"] for f in forgetting], ignore_index=True)
    pre += report.forgetting_preconditions(p, rates, {s: {arm: lin for arm, (lin, _) in runs[s].items()} for s in loop_seeds}, ev)
    specs = report.claim_specs(p) + report.loop_claim_specs(p) + report.forgetting_claim_specs(p, earlier)
    # a suite may hold no weakly cued item at all (tiny smoke suites): those two claims then have nothing to measure
    specs = [s for s in specs if s.table in tables or s.table not in ("success_weak_cue", "contamination_weak_cue")]
    claims = evaluate_claims(specs, tables, pre, ev, seed=seed, track="mol")
    write_unit_tables("mol", tables)
    write_text(PLOTS / "success.csv", rates.to_csv(index=False, float_format="%.6g"))
    write_text(PLOTS / "dev_loss.csv", report.dev_loss_frame(results, base_history).to_csv(index=False, float_format="%.6g"))
    retention = pd.concat([report.retention_rows({arm: lin for arm, (lin, _) in runs[s].items()}, seed=s) for s in loop_seeds],
                          ignore_index=True)
    write_text(PLOTS / "retention.csv", retention.to_csv(index=False, float_format="%.6g"))
    with atomic_path(PLOTS / "success.png") as tmp:
        report.plot_success(rates, tmp)
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(rates, conv, routes, results),
        "versions": report.loop_summary(lineage, answers),
        "versions_monolith": report.loop_summary(*runs[p.versions.seed]["monolith"]),
        "versions_replicates": {str(s): {arm: report.loop_summary(*runs[s][arm]) for arm in report.LOOP_ARMS}
                                for s in p.versions.replicate_seeds},
        "forgetting": report.forgetting_summary({arm: ans for arm, (_, ans) in runs[p.versions.seed].items()}, earlier)
        | {"replicates": {str(s): report.forgetting_summary({arm: ans for arm, (_, ans) in runs[s].items()}, earlier)["arms"]
                          for s in p.versions.replicate_seeds}},
        "preconditions": pre,
        "training_runs": len(results),
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
