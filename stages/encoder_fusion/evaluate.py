"""Stage encoder_fusion_evaluate: per-unit tables, preconditions, claims, the metrics file and the
plot tables (VQA accuracy per fusion/seed/modality; metric agreement with the simulated panel)."""
from __future__ import annotations

from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, load_evidence, write_unit_tables
from paperworks.core.io import read_json, read_parquet, write_json, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion import report
from paperworks.encoder_fusion.artifacts import (DECODER, EXPLORE, METRICS, PANEL, PLOTS, RELIABILITY, VOLUME_VQA, VOLUMES,
                                                 encoder_dir, features_dir, read_vqa)
from paperworks.encoder_fusion.params import Params


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    ev = load_evidence()
    raw = read_params_file()
    seed = global_seed(raw)
    pred, vqa_hist = read_vqa(p.head.seeds, p.head.fusions)
    enc_hist = {s: read_json(encoder_dir(s) / "histories.json") for s in p.head.seeds}
    probe = {s: read_json(features_dir(s) / "detection_probe.json") for s in p.head.seeds}
    tau = read_parquet(PANEL / "tau.parquet")
    panel = read_json(PANEL / "panel.json")
    vol_pred = read_parquet(VOLUME_VQA / "predictions.parquet")
    vol_hist = read_json(VOLUME_VQA / "histories.json")
    vol_world = read_json(VOLUMES / "world.json")
    dec_reports = read_parquet(DECODER / "reports.parquet")
    dec_hist = read_json(DECODER / "histories.json")
    dec_info = read_json(DECODER / "decoder.json")
    ex_comp = read_parquet(EXPLORE / "compliance.parquet")
    ex_tool = read_parquet(EXPLORE / "tool_reports.parquet")
    ex_domain = read_parquet(EXPLORE / "domain_reports.parquet")
    ex_hist = read_json(EXPLORE / "histories.json")
    ex_info = read_json(EXPLORE / "explore.json")
    rel = read_parquet(RELIABILITY / "predictions.parquet")
    rel_info = read_json(RELIABILITY / "reliability.json")
    units = {**report.vqa_units(pred), **report.panel_units(tau), **report.volume_units(vol_pred),
             **report.decoder_units(dec_reports), **report.explore_units(ex_comp, ex_tool), **report.reliability_units(rel, p)}
    pre = (report.preconditions(p, probe, enc_hist, vqa_hist, panel, ev) + report.volume_preconditions(p, vol_world, vol_hist, ev)
           + report.decoder_preconditions(p, dec_hist, dec_info, ev) + report.explore_preconditions(p, ex_hist, ex_info, ev))
    claims = evaluate_claims(report.claim_specs(p) + report.volume_claim_specs(p) + report.decoder_claim_specs(p)
                             + report.explore_claim_specs(p) + report.reliability_claim_specs(p), units, pre, ev, seed=seed,
                             track="encoder_fusion")
    write_unit_tables("encoder_fusion", units)
    write_text(PLOTS / "vqa_accuracy.csv", report.accuracy_plot_table(pred).to_csv(index=False, float_format="%.6g"))
    agree = tau.groupby("metric", as_index=False)["tau"].mean().rename(columns={"tau": "mean_tau"})
    write_text(PLOTS / "metric_agreement.csv", agree.to_csv(index=False, float_format="%.6g"))
    write_text(PLOTS / "volume_vqa.csv", report.volume_plot_table(vol_pred).to_csv(index=False, float_format="%.6g"))
    write_text(PLOTS / "report_roi_f1.csv", report.decoder_plot_table(dec_reports).to_csv(index=False, float_format="%.6g"))
    for name, table in report.reliability_plot_tables(rel, p).items():
        write_text(PLOTS / name, table.to_csv(index=False, float_format="%.6g"))
    write_json(METRICS, {
        "profile": raw.get("profile"),
        "synthetic": "every case, report, system and rater is simulated; no claim is clinical",
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, seed),
        "summary": report.summary(pred, vqa_hist, tau),
        "detection_probe": {f"seed_{s}": v for s, v in probe.items()},
        "panel": panel,
        "volume": {**report.volume_summary(vol_pred, vol_hist), "world": vol_world, "training_runs": p.volume.seeds},
        "report_decoder": {**report.decoder_summary(dec_reports, dec_hist, dec_info), "training_runs": p.decoder.seeds},
        "explore": {**report.explore_summary(ex_comp, ex_tool, ex_domain, ex_info), "training_runs": p.explore.seeds},
        "reliability": {**report.reliability_summary(rel, rel_info, p), "training_runs": len(p.head.seeds)},
        "preconditions": pre,
        "training_runs": len(p.head.seeds),
    })
    for c in claims:
        print(f"{c['id']}: {c['verdict']}  ({c['method_mean']} vs {c['baseline_mean']})")


if __name__ == "__main__":
    main()
