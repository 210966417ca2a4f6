"""Stage mol_evaluate: per-(capability, seed) success and contamination, whole-conversation success
per routing policy, preconditions, claims, the success plot and the dev-loss curves; the versioned loop on the
mixture of LoRA (``mol_versions``) vs on one monolithic LoRA (``mol_versions_monolith``): forgetting per
(capability, seed) and per-cycle retention of every capability on every earlier accepted suite."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.io import atomic_path, read_json, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.mol import report
from paperworks.mol.artifacts import BASE_HISTORY, PLOTS, ROUTER, VERSIONS, VERSIONS_MONOLITH, read_seed_results
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
    lineage = read_json(VERSIONS / "lineage.json")
    answers = read_json(VERSIONS / "answers.json")
    tables |= report.version_tables(answers)
    pre += report.loop_preconditions(lineage, ev)
    loops = {"mol": (lineage, answers),
             "monolith": (read_json(VERSIONS_MONOLITH / "lineage.json"), read_json(VERSIONS_MONOLITH / "answers.json"))}
    earlier = report.earlier_suites(answers, p.versions.cycles[-1].shift)
    tables |= report.forgetting_table({arm: ans for arm, (_, ans) in loops.items()}, earlier, p.versions.seed)
    pre += report.forgetting_preconditions(p, rates, {arm: lin for arm, (lin, _) in loops.items()}, ev)
    specs = report.claim_specs(p) + report.loop_claim_specs(p) + report.forgetting_claim_specs(p, earlier)
    # a suite may hold no weakly cued item at all (tiny smoke suites): those two claims then have nothing to measure
    specs = [s for s in specs if s.table in tables or s.table not in ("success_weak_cue", "contamination_weak_cue")]
    claims = evaluate_claims(specs, tables, pre, ev, seed=seed, track="mol")
    write_unit_tables("mol", tables)
    write_text(PLOTS / "success.csv", rates.to_csv(index=False, float_format="%.6g"))
    write_text(PLOTS / "dev_loss.csv", report.dev_loss_frame(results, base_history).to_csv(index=False, float_format="%.6g"))
    write_text(PLOTS / "retention.csv", report.retention_rows({arm: lin for arm, (lin, _) in loops.items()})
               .to_csv(index=False, float_format="%.6g"))
    with atomic_path(PLOTS / "success.png") as tmp:
        report.plot_success(rates, tmp)
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(rates, conv, routes, results),
        "versions": report.loop_summary(lineage, answers),
        "versions_monolith": report.loop_summary(*loops["monolith"]),
        "forgetting": report.forgetting_summary({arm: ans for arm, (_, ans) in loops.items()}, earlier),
        "preconditions": pre,
        "training_runs": len(results),
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
