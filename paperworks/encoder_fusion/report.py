"""Aggregate the runs into per-unit tables, preconditions, claims, summaries and plot tables (pure
functions of the loaded artifacts)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, learned, precondition, unit_table
from paperworks.encoder_fusion.params import MODALITIES, Params

BASELINE_METRICS = ("entity_f1", "label_f1", "bleu", "rouge_l", "embedding")
FUSION_PRE = ("specialists beat the foundation on small-lesion detection", "every trained model converged",
              "every trained model learned")
PANEL_PRE = ("finding tagger accurate on held-out paraphrased sentences",)


def vqa_units(pred: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Test questions nested in the seed that trained the head: arm = fusion, cluster = seed, unit = question."""
    def table(d: pd.DataFrame) -> pd.DataFrame:
        return unit_table(d.rename(columns={"fusion": "arm", "seed": "cluster", "key": "unit", "correct": "value"}))

    out = {"vqa_accuracy": table(pred), "small_lesion_accuracy": table(pred[pred["small"]])}
    for m in MODALITIES:
        out[f"vqa_accuracy_{m}"] = table(pred[pred["modality"] == m])
    return out


def panel_units(tau: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One study (no retraining): arm = metric, unit = case, every case its own cluster."""
    return {"panel_tau": unit_table(tau.rename(columns={"metric": "arm", "case_id": "unit", "tau": "value"}).assign(cluster="study"))}


def _probe_detail(probe: dict[int, dict]) -> str:
    """Each modality's worst seed (the precondition reads the worst), with the test counts."""
    parts = []
    for m in next(iter(probe.values())):
        s = min(probe, key=lambda k: probe[k][m]["specialist"] - probe[k][m]["foundation"])
        r = probe[s][m]
        parts.append(f"{m}: specialist {r['specialist']:.3f} vs foundation {r['foundation']:.3f} balanced accuracy at its worst "
                     f"seed ({s} of {len(probe)}; {r['n_test_small']} small-lesion of {r['n_test_regions']} test regions)")
    return "; ".join(parts)


def preconditions(p: Params, probe: dict[int, dict], enc_hist: dict[int, dict], vqa_hist: dict, panel: dict,
                  ev: EvidenceParams) -> list[dict]:
    """``probe`` / ``enc_hist``: per seed, that seed's detection probe and encoder curves (each seed trains its own
    encoders): the specialist gain must hold for the worst seed and modality, every curve must converge."""
    gains = {(s, m): r[m]["specialist"] - r[m]["foundation"] for s, r in probe.items() for m in r}
    worst = min(gains.values()) if gains and all(np.isfinite(v) for v in gains.values()) else float("nan")
    # (curve, rows up to the checkpoint in use): the plateau is read on the whole curve, "learned" on the
    # part up to the selected checkpoint (F and the heads end at their best held-out checkpoint)
    runs = {}
    for s, h in sorted(enc_hist.items()):
        runs[f"foundation seed {s} (held-out contrastive loss)"] = (h["foundation"], "heldout_loss")
        for m in MODALITIES:
            runs[f"specialist {m} seed {s} (held-out loss)"] = (h[f"specialist_{m}"], "heldout_loss")
    for run, h in sorted(vqa_hist.items()):
        runs[f"head {run} (dev loss)"] = (h, "dev_loss")
    curves, used = {}, {}
    for name, (rows, key) in runs.items():
        curves[name] = [r[key] for r in rows]
        last = max([i for i, r in enumerate(rows) if r.get("selected")], default=len(rows) - 1)
        used[name] = curves[name][:last + 1]
    return [
        precondition(FUSION_PRE[0], bool(np.isfinite(worst) and worst >= p.claims.min_specialist_gain), value=round(worst, 4),
                     threshold=p.claims.min_specialist_gain,
                     detail=_probe_detail(probe)),
        combine(FUSION_PRE[1], [convergence(k, v, ev, abs_tol=ev.convergence_abs_tol_nats) for k, v in curves.items()], "training curves"),
        combine(FUSION_PRE[2], [learned(k, v, p.claims.min_rel_improvement, ev) for k, v in used.items()],
                "training curves (up to the checkpoint in use)"),
        precondition(PANEL_PRE[0], panel["tagger_heldout_field_accuracy"] >= p.claims.min_tagger_accuracy,
                     value=round(panel["tagger_heldout_field_accuracy"], 4), threshold=p.claims.min_tagger_accuracy,
                     detail=f"trained on {panel['tagger_training_sentences']} annotated sentences of its own; 500 held-out, every one paraphrased"),
    ]


def claim_specs(p: Params) -> list[ClaimSpec]:
    """Headline first: cascade vs foundation, cascade vs parallel (2D VQA), RoI metric vs entity-F1 (panel)."""
    seeds = len(p.head.seeds)
    vqa = dict(metric="VQA accuracy", unit="question", cluster="seed", preconditions=FUSION_PRE)
    specs = [ClaimSpec(id="cascade_vs_foundation", role="headline", table="vqa_accuracy", method="cascade", baseline="foundation",
                       statement=f"cascade fusion (F → S_xray → S_path, zero-gated local cross-attention) beats the foundation "
                                 f"encoder alone on 2D VQA ({seeds} seeds)", **vqa)]
    if "parallel" in p.head.fusions:
        specs.append(ClaimSpec(id="cascade_vs_parallel", role="headline", table="vqa_accuracy", method="cascade", baseline="parallel",
                               statement=f"cascade fusion beats parallel fusion (averaged projected tokens) on 2D VQA ({seeds} seeds)", **vqa))
    specs.append(ClaimSpec(id="roi_metric_vs_entity_f1", role="headline", table="panel_tau", metric="Kendall τ with the simulated panel",
                           method="roi", baseline="entity_f1", unit="case", cluster=None, preconditions=PANEL_PRE,
                           statement="the RoI-grounded metric agrees with a simulated rater panel better than entity-F1 (RadGraph-like)"))
    for m in MODALITIES:
        for base in [b for b in ("foundation", "parallel") if b in p.head.fusions]:
            specs.append(ClaimSpec(id=f"cascade_vs_{base}_{m}", table=f"vqa_accuracy_{m}", method="cascade", baseline=base,
                                   statement=f"cascade beats {base} on {m} VQA", **vqa))
    specs.append(ClaimSpec(id="cascade_vs_foundation_small", table="small_lesion_accuracy", method="cascade", baseline="foundation",
                           statement="cascade beats the foundation on questions about regions with a small lesion", **vqa))
    if "parallel_query" in p.head.fusions:
        specs.append(ClaimSpec(id="cascade_vs_parallel_query", table="vqa_accuracy", method="cascade", baseline="parallel_query",
                               statement=f"cascade fusion beats parallel fusion with learnable-query aggregation (SVA-like: one "
                                         f"learned query per cell over every encoder's tokens in its window) on 2D VQA ({seeds} seeds)",
                               **vqa))
    for b in BASELINE_METRICS[1:]:
        specs.append(ClaimSpec(id=f"roi_metric_vs_{b}", table="panel_tau", metric="Kendall τ with the simulated panel", method="roi",
                               baseline=b, unit="case", cluster=None, preconditions=PANEL_PRE,
                               statement=f"the RoI-grounded metric agrees with the simulated panel better than {b}"))
    return specs


def summary(pred: pd.DataFrame, vqa_hist: dict, tau: pd.DataFrame) -> dict:
    acc = {}
    for fusion, g in pred.groupby("fusion"):
        per_seed = g.groupby("seed")["correct"].mean()
        acc[fusion] = {"all": round(float(per_seed.mean()), 4),
                       **{m: round(float(g[g["modality"] == m].groupby("seed")["correct"].mean().mean()), 4) for m in MODALITIES},
                       "small_lesion": round(float(g[g["small"]].groupby("seed")["correct"].mean().mean()), 4) if g["small"].any() else None}
    gates, selected = {}, {}
    for run, h in vqa_hist.items():
        row = next((r for r in h if r.get("selected")), h[-1])  # the checkpoint the test predictions come from
        selected.setdefault(run.rsplit("-", 1)[0], []).append(row["step"])
        for k, v in row.items():
            if k.startswith("gate"):
                gates.setdefault(k, []).append(v)
    return {"vqa_accuracy": acc, "final_gates_mean": {k: round(float(np.mean(v)), 4) for k, v in gates.items()},
            "selected_step_mean": {k: float(np.mean(v)) for k, v in sorted(selected.items())},
            "panel_mean_tau": {m: round(float(v), 4) for m, v in tau.groupby("metric")["tau"].mean().items()}}


def accuracy_plot_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Per fusion × seed × modality × subset (all, small-lesion regions): test VQA accuracy."""
    rows = []
    for (fusion, seed, m), g in pred.groupby(["fusion", "seed", "modality"]):
        rows.append({"fusion": fusion, "seed": int(seed), "modality": m, "subset": "all", "accuracy": g["correct"].mean()})
        if g["small"].any():
            rows.append({"fusion": fusion, "seed": int(seed), "modality": m, "subset": "small_lesion",
                         "accuracy": g[g["small"]]["correct"].mean()})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ comparison 2: CT-like volumes
VOLUME_PRE = ("sampled slices miss thin lesions", "every volume model converged", "every volume model learned")


def volume_units(pred: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Test questions nested in the seed that trained the arm: arm = volume arm, cluster = seed, unit = question.
    ``thin_lesion_recall``: presence questions on regions whose lesion spans one slice (correct = recalled)."""
    def table(d: pd.DataFrame) -> pd.DataFrame:
        return unit_table(d.rename(columns={"seed": "cluster", "key": "unit", "correct": "value"}))

    return {"volume_vqa_accuracy": table(pred),
            "thin_lesion_recall": table(pred[(pred["qtype"] == "presence") & (pred["span"] == 1)])}


def volume_preconditions(p: Params, world: dict, hist: dict, ev: EvidenceParams) -> list[dict]:
    share = world["thin_missed_share"]
    curves, used = {}, {}
    for run, rows in sorted(hist.items()):
        name = f"volume {run} (dev loss)"
        curves[name] = [r["dev_loss"] for r in rows]
        last = max([i for i, r in enumerate(rows) if r.get("selected")], default=len(rows) - 1)
        used[name] = curves[name][:last + 1]
    return [
        precondition(VOLUME_PRE[0], bool(np.isfinite(share) and share >= p.claims.min_thin_missed), value=round(share, 4),
                     threshold=p.claims.min_thin_missed,
                     detail=f"{world['n_thin_test_lesions']} thin (1-slice) test lesions; sampled slices {world['sampled_slices']} "
                            f"of {p.volume.depth}"),
        combine(VOLUME_PRE[1], [convergence(k, v, ev, abs_tol=ev.convergence_abs_tol_nats) for k, v in curves.items()], "volume training curves"),
        combine(VOLUME_PRE[2], [learned(k, v, p.claims.min_rel_improvement, ev) for k, v in used.items()],
                "volume training curves (up to the checkpoint in use)"),
    ]


def volume_claim_specs(p: Params) -> list[ClaimSpec]:
    """Comparison 2 (exploratory role): anchored vs sampled on 3D VQA and thin-lesion recall; vs the 3D encoder."""
    v = p.volume
    common = dict(unit="question", cluster="seed", preconditions=VOLUME_PRE)
    specs = [ClaimSpec(id="anchored_vs_sampled_3d", table="volume_vqa_accuracy", metric="3D VQA accuracy", method="anchored",
                       baseline="sampled", statement=f"2D-anchored depth-aware fusion beats {v.k_slices} sampled slices of "
                                                     f"{v.depth} on 3D VQA ({v.seeds} seeds)", **common),
             ClaimSpec(id="anchored_vs_sampled_thin_recall", table="thin_lesion_recall", metric="small-lesion recall",
                       method="anchored", baseline="sampled",
                       statement=f"2D-anchored fusion recalls thin (1-slice) lesions better than {v.k_slices} sampled slices", **common)]
    if "encoder3d" in v.arms:
        specs.append(ClaimSpec(id="anchored_vs_encoder3d_3d", table="volume_vqa_accuracy", metric="3D VQA accuracy",
                               method="anchored", baseline="encoder3d",
                               statement="2D-anchored fusion beats a 3D encoder with its own projector on 3D VQA", **common))
    return specs


def volume_summary(pred: pd.DataFrame, hist: dict) -> dict:
    out = {}
    for arm, g in pred.groupby("arm"):
        thin = g[(g["qtype"] == "presence") & (g["span"] == 1)]
        thick = g[(g["qtype"] == "presence") & (g["span"] > 1)]
        out[arm] = {"vqa_accuracy": round(float(g.groupby("seed")["correct"].mean().mean()), 4),
                    "thin_lesion_recall": round(float(thin.groupby("seed")["correct"].mean().mean()), 4) if len(thin) else None,
                    "thicker_lesion_recall": round(float(thick.groupby("seed")["correct"].mean().mean()), 4) if len(thick) else None,
                    "selected_step_mean": float(np.mean([next((r for r in h if r.get("selected")), h[-1])["step"]
                                                         for run, h in hist.items() if run.rsplit("-", 1)[0] == arm]))}
    gates = [next((r for r in h if r.get("selected")), h[-1]).get("gate_depth") for h in hist.values()]
    gates = [x for x in gates if x is not None]
    return {"arms": out, "final_depth_gate_mean": round(float(np.mean(gates)), 4) if gates else None}


def volume_plot_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Per arm × seed × subset (all questions; presence on thin / thicker lesions): test accuracy."""
    rows = []
    for (arm, seed), g in pred.groupby(["arm", "seed"]):
        pres = g[g["qtype"] == "presence"]
        for subset, d in (("all", g), ("thin_lesion_recall", pres[pres["span"] == 1]), ("thicker_lesion_recall", pres[pres["span"] > 1])):
            if len(d):
                rows.append({"arm": arm, "seed": int(seed), "subset": subset, "accuracy": d["correct"].mean()})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ downstream: the report decoder
DECODER_PRE = ("every report decoder converged", "every report decoder learned",
               "report scorer's tagger accurate on held-out paraphrased sentences")


def decoder_units(reports: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Test cases nested in the seed that trained the decoder: arm = fusion, cluster = seed, unit = case, value = RoI-F1."""
    return {"report_roi_f1": unit_table(reports.rename(columns={"fusion": "arm", "seed": "cluster", "case_id": "unit",
                                                               "roi_f1": "value"}))}


def decoder_preconditions(p: Params, hist: dict, info: dict, ev: EvidenceParams) -> list[dict]:
    """The decoders' dev-loss curves: a plateau over the whole curve, "learned" up to the checkpoint in use;
    the tagger that reads the generated reports (the panel's, retrained in the decoder stage) on held-out sentences."""
    curves, used = {}, {}
    for run, rows in sorted(hist.items()):
        name = f"decoder {run} (dev loss)"
        curves[name] = [r["dev_loss"] for r in rows]
        last = max([i for i, r in enumerate(rows) if r.get("selected")], default=len(rows) - 1)
        used[name] = curves[name][:last + 1]
    acc = info["tagger_heldout_field_accuracy"]
    return [
        combine(DECODER_PRE[0], [convergence(k, v, ev, abs_tol=ev.convergence_abs_tol_nats) for k, v in curves.items()], "decoder dev-loss curves"),
        combine(DECODER_PRE[1], [learned(k, v, p.claims.min_rel_improvement, ev) for k, v in used.items()],
                "decoder dev-loss curves (up to the checkpoint in use)"),
        precondition(DECODER_PRE[2], acc >= p.claims.min_tagger_accuracy, value=round(acc, 4), threshold=p.claims.min_tagger_accuracy,
                     detail=f"trained on {info['tagger_training_sentences']} annotated sentences of its own; 500 held-out, every one paraphrased"),
    ]


def decoder_claim_specs(p: Params) -> list[ClaimSpec]:
    """Exploratory: the report RoI-F1 of the cascade's decoder vs each other fusion's."""
    common = dict(table="report_roi_f1", metric="report RoI-F1", unit="case", cluster="seed", preconditions=DECODER_PRE,
                  method="cascade")
    return [ClaimSpec(id=f"report_cascade_vs_{base}", baseline=base,
                      statement=f"the report decoder over cascade-fused tokens writes reports with a higher RoI-F1 than over "
                                f"{'the foundation alone' if base == 'foundation' else base + ' fusion'} ({p.decoder.seeds} seeds)", **common)
            for base in ("foundation", "parallel", "parallel_query") if base in p.head.fusions]


def decoder_summary(reports: pd.DataFrame, hist: dict, info: dict) -> dict:
    out = {}
    for fusion, g in reports.groupby("fusion"):
        per_seed = g.groupby("seed")
        out[fusion] = {"roi_f1": round(float(per_seed["roi_f1"].mean().mean()), 4),
                       "roi_score": round(float(per_seed["roi_score"].mean().mean()), 4),
                       **{k: round(float(per_seed[k].mean().mean()), 4) for k in ("n_matched", "n_missed", "n_hallucinated")},
                       "selected_step_mean": float(np.mean([next((r for r in h if r.get("selected")), h[-1])["step"]
                                                            for run, h in hist.items() if run.rsplit("-", 1)[0] == fusion]))}
    return {"fusions": out, "training_paraphrase_rate": info["training_paraphrase_rate"],
            "reference_paraphrase_rate": info["reference_paraphrase_rate"], "vocab": info["vocab"],
            "prefix_tokens": info["prefix_tokens"], "lm_config": info["lm_config"],
            "encoder_seeds": info["encoder_seeds"]}  # decoder seed → the encoder draw (head seed) it read


def decoder_plot_table(reports: pd.DataFrame) -> pd.DataFrame:
    """Per fusion × seed × modality: mean report RoI-F1 and mean matched / missed / hallucinated findings per report."""
    return (reports.groupby(["fusion", "seed", "modality"], as_index=False)
            .agg(roi_f1=("roi_f1", "mean"), matched=("n_matched", "mean"), missed=("n_missed", "mean"),
                 hallucinated=("n_hallucinated", "mean")))


# ------------------------------------------------------------------ exploratory: instruction retention, tool use
EXPLORE_PRE = ("every explore decoder converged", "every explore decoder learned",
               "instruction tuning taught the formats", "segmentation tool reads the test cases")


def explore_units(comp: pd.DataFrame, tool: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Retention: unit = (test case, instruction kind), value = complies; tool use: unit = test case, value = RoI-F1;
    both nested in the seed (cluster) of the run."""
    c = comp.assign(unit=comp["case_id"] + "|" + comp["kind"], value=comp["complies"].astype(float))
    return {"instruction_compliance": unit_table(c[["arm", "seed", "unit", "value"]].rename(columns={"seed": "cluster"})),
            "tool_report_roi_f1": unit_table(tool.rename(columns={"seed": "cluster", "case_id": "unit", "roi_f1": "value"}))}


def explore_preconditions(p: Params, hist: dict, info: dict, ev: EvidenceParams) -> list[dict]:
    curves, used = {}, {}
    for run, rows in sorted(hist.items()):
        name = f"explore {run} (dev loss)"
        curves[name] = [r["dev_loss"] for r in rows]
        last = max([i for i, r in enumerate(rows) if r.get("selected")], default=len(rows) - 1)
        used[name] = curves[name][:last + 1]
    pre = info["instruction_compliance_before_domain_tuning"]
    worst = min(pre.values()) if pre else float("nan")
    f1 = info["tool_entity_f1_test"]
    return [
        combine(EXPLORE_PRE[0], [convergence(k, v, ev, abs_tol=ev.convergence_abs_tol_nats) for k, v in curves.items()], "explore dev-loss curves"),
        combine(EXPLORE_PRE[1], [learned(k, v, p.claims.min_rel_improvement, ev) for k, v in used.items()],
                "explore dev-loss curves (up to the checkpoint in use)"),
        precondition(EXPLORE_PRE[2], bool(np.isfinite(worst) and worst >= p.claims.min_instruction_compliance), value=round(worst, 4),
                     threshold=p.claims.min_instruction_compliance,
                     detail=f"dev compliance after instruction tuning, worst seed of {len(pre)} ({info['n_dev_instruction_items']} dev items each)"),
        precondition(EXPLORE_PRE[3], bool(np.isfinite(f1) and f1 >= p.claims.min_tool_f1), value=round(f1, 4), threshold=p.claims.min_tool_f1,
                     detail="mean entity-F1 of the tool's (region, type, size) findings against the test cases' truth, worst seed of "
                            f"{len(info['tool_entity_f1_test_per_seed'])} (seed i's tool: encoder draw head.seeds[i]'s specialists)"),
    ]


def explore_claim_specs(p: Params) -> list[ClaimSpec]:
    e = p.explore
    return [ClaimSpec(id="instruction_retention_mixed_vs_domain_only", table="instruction_compliance", metric="format-instruction compliance",
                      method="mixed", baseline="domain_only", unit="instruction item", cluster="seed", preconditions=EXPLORE_PRE[:3],
                      statement=f"after domain tuning, a report decoder ({e.retention_fusion} fusion) still follows format instructions more "
                                f"often when {e.mix_share:.0%} of the domain batches are instruction data than without ({e.seeds} seeds)"),
            ClaimSpec(id="tool_use_vs_none", table="tool_report_roi_f1", metric="report RoI-F1", method="tool", baseline="none",
                      unit="case", cluster="seed", preconditions=(EXPLORE_PRE[0], EXPLORE_PRE[1], EXPLORE_PRE[3]),
                      statement=f"the report decoder over the {e.tool_fusion} fusion writes reports with a higher RoI-F1 when the "
                                f"segmentation tool's region text is in its prompt than without ({e.seeds} seeds)")]


def explore_summary(comp: pd.DataFrame, tool: pd.DataFrame, domain: pd.DataFrame, info: dict) -> dict:
    def per_seed_mean(df: pd.DataFrame, col: str) -> float:
        return round(float(df.groupby("seed")[col].mean().mean()), 4)

    comp = comp.assign(c=comp["complies"].astype(float))
    return {"instruction_compliance": {arm: {"all": per_seed_mean(g, "c"),
                                             **{k: per_seed_mean(gk, "c") for k, gk in g.groupby("kind")}}
                                       for arm, g in comp.groupby("arm")},
            "instruction_compliance_before_domain_tuning": info["instruction_compliance_before_domain_tuning"],
            "domain_report_roi_f1": {arm: per_seed_mean(g, "roi_f1") for arm, g in domain.groupby("arm")},
            "tool_report_roi_f1": {arm: {"roi_f1": per_seed_mean(g, "roi_f1"),
                                         **{k: per_seed_mean(g, k) for k in ("n_matched", "n_missed", "n_hallucinated")}}
                                   for arm, g in tool.groupby("arm")},
            "tool_entity_f1_test": round(info["tool_entity_f1_test"], 4),
            "tool_entity_f1_test_per_seed": {k: round(v, 4) for k, v in info["tool_entity_f1_test_per_seed"].items()},
            "encoder_seeds": info["encoder_seeds"], "tool_examples": info["tool_examples"],
            "mix_share": info["mix_share"], "domain_paraphrase_rate": info["domain_paraphrase_rate"],
            "retention_fusion": info["retention_fusion"], "tool_fusion": info["tool_fusion"], "prompt_tokens": info["prompt_tokens"]}


# ------------------------------------------------------------------ beyond the paper: abstention, degradation
RELIABILITY_PRE = FUSION_PRE[1:]  # the heads' own convergence records (the same trained models)
COVERAGES = tuple(round(c, 2) for c in np.arange(0.5, 1.0001, 0.05))


def reliability_units(rel: pd.DataFrame, p: Params) -> dict[str, pd.DataFrame]:
    """``selective_accuracy``: arm ``<fusion>_answered`` = the test questions the head answered at its dev-fitted
    threshold, arm ``<fusion>_all`` = every test question (value = correct; unit question, cluster seed; the two
    arms hold different questions, so the comparison is unpaired at the question level).
    ``degradation_drop``: arm = fusion, value = clean − degraded correctness of the same test question.
    Only the fusions a claim reads are kept (the abstention fusions, cascade and foundation): the other arms' numbers
    are in the plot tables, and a unit row per question of every arm made an 8 MB committed table."""
    claimed = set(p.reliability.abstention_fusions) | {"cascade", "foundation"}
    rel = rel[rel["fusion"].isin(claimed)]
    test = rel[rel["split"] == "test"]
    parts = []
    for fusion, g in test.groupby("fusion"):
        parts.append(g[g["answered"]].assign(arm=f"{fusion}_answered"))
        parts.append(g.assign(arm=f"{fusion}_all"))
    sel = pd.concat(parts).rename(columns={"seed": "cluster", "key": "unit", "correct": "value"})
    clean = test.set_index(["fusion", "seed", "key"])["correct"]
    bad = rel[rel["split"] == "test_degraded"].set_index(["fusion", "seed", "key"])["correct"]
    if not clean.index.sort_values().equals(bad.index.sort_values()):
        raise ValueError("degraded predictions do not cover the same (fusion, seed, question) rows as the clean ones")
    drop = (clean - bad.reindex(clean.index)).rename("value").reset_index()
    return {"selective_accuracy": unit_table(sel),
            "degradation_drop": unit_table(drop.rename(columns={"fusion": "arm", "seed": "cluster", "key": "unit"}))}


def reliability_claim_specs(p: Params) -> list[ClaimSpec]:
    r, seeds = p.reliability, len(p.head.seeds)
    common = dict(unit="question", cluster="seed", preconditions=RELIABILITY_PRE)
    specs = [ClaimSpec(id=f"abstention_raises_accuracy_{f}", table="selective_accuracy", metric="VQA accuracy on answered questions",
                       method=f"{f}_answered", baseline=f"{f}_all", paired=False,
                       statement=f"{f}: abstaining below the dev-fitted confidence threshold (≈ {r.coverage:.0%} of dev questions "
                                 f"answered, temperature-scaled) raises accuracy on the answered test questions ({seeds} seeds)", **common)
             for f in r.abstention_fusions]
    specs.append(ClaimSpec(id="selective_cascade_vs_foundation", table="selective_accuracy", metric="VQA accuracy on answered questions",
                           method="cascade_answered", baseline="foundation_answered", paired=False,
                           statement=f"at its dev-fitted threshold (≈ {r.coverage:.0%} coverage), cascade fusion is more accurate on the "
                                     f"questions it answers than the foundation alone on its own ({seeds} seeds)", **common))
    d = r.degrade
    specs.append(ClaimSpec(id="degradation_cascade_vs_foundation", table="degradation_drop", metric="VQA accuracy drop under degradation",
                           method="cascade", baseline="foundation", higher_is_better=False,
                           statement=f"cascade fusion loses less VQA accuracy than the foundation alone when the test images are degraded "
                                     f"(blur σ {d.blur:g}, gain {d.gain:g}, offset {d.offset:+g}, noise σ {d.noise:g}; no retraining; {seeds} seeds)",
                           **common))
    return specs


def reliability_summary(rel: pd.DataFrame, info: dict, p: Params) -> dict:
    from paperworks.core.adaptive import expected_calibration_error

    out = {}
    for fusion, g in rel.groupby("fusion"):
        test, bad = g[g["split"] == "test"], g[g["split"] == "test_degraded"]
        per = test.groupby("seed")
        out[fusion] = {
            "ece_raw": round(float(np.mean([expected_calibration_error(d["confidence_raw"].to_numpy(), d["correct"].to_numpy(), p.reliability.n_bins)
                                            for _, d in per])), 4),
            "ece_calibrated": round(float(np.mean([expected_calibration_error(d["confidence"].to_numpy(), d["correct"].to_numpy(), p.reliability.n_bins)
                                                   for _, d in per])), 4),
            "test_coverage": round(float(per["answered"].mean().mean()), 4),
            "accuracy_all": round(float(per["correct"].mean().mean()), 4),
            "accuracy_answered": round(float(test[test["answered"]].groupby("seed")["correct"].mean().mean()), 4),
            "accuracy_degraded": round(float(bad.groupby("seed")["correct"].mean().mean()), 4),
            "temperature_mean": round(float(np.mean([v["temperature"] for k, v in info["runs"].items() if k.rsplit("-", 1)[0] == fusion])), 4),
        }
        small = test[test["small"]]
        if len(small):
            out[fusion]["small_lesion_accuracy_degraded"] = round(float(bad[bad["small"]].groupby("seed")["correct"].mean().mean()), 4)
    return {"fusions": out, "coverage_target": info["coverage_target"], "degrade": info["degrade"],
            "mean_abs_pixel_change": round(info["mean_abs_pixel_change"], 3)}


def reliability_plot_tables(rel: pd.DataFrame, p: Params) -> dict[str, pd.DataFrame]:
    """``reliability.csv``: fusion × confidence bin (test, temperature-scaled, pooled over seeds): count, mean
    confidence, accuracy; ``selective_accuracy.csv``: fusion × seed × coverage: accuracy on the most confident
    share; ``degradation.csv``: fusion × seed × modality: clean and degraded accuracy."""
    from paperworks.core.adaptive import reliability_bins
    from paperworks.encoder_fusion.reliability import selective_curve

    test = rel[rel["split"] == "test"]
    rel_rows, sel_rows = [], []
    for fusion, g in test.groupby("fusion"):
        for calibrated, col in (("calibrated", "confidence"), ("raw", "confidence_raw")):
            bins = reliability_bins(g[col].to_numpy(), g["correct"].to_numpy(), p.reliability.n_bins).to_frame()
            rel_rows.append(bins.assign(fusion=fusion, confidence_kind=calibrated))
        for s, d in g.groupby("seed"):
            sel_rows.append(selective_curve(d["confidence"].to_numpy(), d["correct"].to_numpy(), np.array(COVERAGES))
                            .assign(fusion=fusion, seed=int(s)))
    deg = (rel[rel["split"] != "dev"].groupby(["fusion", "seed", "modality", "split"])["correct"].mean()
           .unstack("split").rename(columns={"test": "clean", "test_degraded": "degraded"}).reset_index())
    deg["drop"] = deg["clean"] - deg["degraded"]
    return {"reliability.csv": pd.concat(rel_rows, ignore_index=True)[["fusion", "confidence_kind", "bin_low", "bin_high", "count",
                                                                       "confidence", "accuracy"]],
            "selective_accuracy.csv": pd.concat(sel_rows, ignore_index=True)[["fusion", "seed", "coverage", "answered", "accuracy"]],
            "degradation.csv": deg[["fusion", "seed", "modality", "clean", "degraded", "drop"]]}
