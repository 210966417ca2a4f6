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


def preconditions(p: Params, probe: dict, enc_hist: dict, vqa_hist: dict, panel: dict, ev: EvidenceParams) -> list[dict]:
    gains = {m: probe[m]["specialist"] - probe[m]["foundation"] for m in probe}
    worst = min(gains.values()) if gains and all(np.isfinite(v) for v in gains.values()) else float("nan")
    # (curve, rows up to the checkpoint in use): the plateau is read on the whole curve, "learned" on the
    # part up to the selected checkpoint (F and the heads end at their best held-out checkpoint)
    runs = {"foundation (held-out contrastive loss)": (enc_hist["foundation"], "heldout_loss")}
    for m in MODALITIES:
        runs[f"specialist {m} (held-out loss)"] = (enc_hist[f"specialist_{m}"], "heldout_loss")
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
                     detail="; ".join(f"{m}: specialist {probe[m]['specialist']:.3f} vs foundation {probe[m]['foundation']:.3f} "
                                      f"balanced accuracy ({probe[m]['n_test_small']} small-lesion of {probe[m]['n_test_regions']} test regions)"
                                      for m in probe)),
        combine(FUSION_PRE[1], [convergence(k, v, ev) for k, v in curves.items()], "training curves"),
        combine(FUSION_PRE[2], [learned(k, v, p.claims.min_rel_improvement, ev) for k, v in used.items()],
                "training curves (up to the checkpoint in use)"),
        precondition(PANEL_PRE[0], panel["tagger_heldout_field_accuracy"] >= p.claims.min_tagger_accuracy,
                     value=round(panel["tagger_heldout_field_accuracy"], 4), threshold=p.claims.min_tagger_accuracy,
                     detail=f"trained on {panel['tagger_training_sentences']} annotated sentences of its own; 500 held-out, every one paraphrased"),
    ]


def claim_specs(p: Params) -> list[ClaimSpec]:
    """Headline first: cascade vs foundation, cascade vs parallel (2D VQA), RoI metric vs entity-F1 (panel)."""
    seeds = p.head.seeds
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
