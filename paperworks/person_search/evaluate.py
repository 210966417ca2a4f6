"""Metrics over ranked lists (one relevant gallery image per query) and the contact sheet."""
from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image
from sklearn.metrics import roc_auc_score

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, precondition, unit_table
from paperworks.core.ranking import average_precision_at_k, recall_at_k
from paperworks.core.render import contact_sheet

KS = (1, 5, 10)
GATE = "the consensus gate fires on validation"


def per_query_metrics(ranked_ids: np.ndarray, targets: np.ndarray) -> dict[str, np.ndarray]:
    """AP@10 and R@{1,5,10} per query, via ``core.ranking`` (each query has exactly one relevant item)."""
    rels = (ranked_ids[:, :10] == targets[:, None]).astype(float)
    out = {"map@10": np.array([average_precision_at_k(r, 10, n_relevant=1) for r in rels])}
    for k in KS:
        out[f"r@{k}"] = np.array([recall_at_k(r, k, n_relevant=1) for r in rels])
    return out


def summarise(per_query: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    return {k: float(v[mask].mean()) for k, v in per_query.items()}


def sheet_for_queries(
    captions: list[str], before: np.ndarray, after: np.ndarray, targets: np.ndarray, images: np.ndarray, top: int = 5
) -> Image.Image:
    """Two rows per query: the top-``top`` before reranking (fusion) and after (consensus); target in green."""
    rows, caps, borders, labels = [], [], [], []
    green, grey = (0, 170, 0), (200, 200, 200)
    for cap, b, a, t in zip(captions, before, after, targets):
        for tag, ids in (("BEFORE (fusion)", b), ("AFTER (consensus)", a)):
            ids = ids[:top]
            rows.append([images[i] for i in ids])
            caps.append(f"{tag}: {cap}" if tag.startswith("BEFORE") else f"{tag}; target rank "
                        f"{int(np.flatnonzero(a == t)[0]) + 1 if (a == t).any() else '>10'}")
            borders.append([green if i == t else grey for i in ids])
            labels.append([f"#{r + 1}" for r in range(len(ids))])
    return contact_sheet(rows, caps, borders, labels, scale=2, caption_width=330)


# ------------------------------------------------------------------ claims
ABLATIONS = ("fusion_no_anchor", "fusion_zscore", "fusion_no_agreement")
CONVERGED = "every encoder and expert converged"


def query_units(ap_test: dict[int, dict[str, np.ndarray]], query_ids: np.ndarray) -> pd.DataFrame:
    """AP@10 per (method, training run, test query): ``ap_test[seed][method]``. Each seed is one
    independent training run of every encoder and expert (the cluster); the test queries sit inside it."""
    return unit_table([{"arm": m, "cluster": f"seed {seed}", "unit": q, "value": float(v)}
                       for seed, by_method in sorted(ap_test.items()) for m, vals in sorted(by_method.items())
                       for q, v in zip(query_ids, vals)])


def preconditions(curves: dict[str, list[float]], kept_val_fraction: dict, ev: EvidenceParams) -> list[dict]:
    """Every trained tower and expert converged (its held-out loss curve reached a plateau); in every
    training run the consensus gate keeps some stage-1 lists and reranks others on validation
    (otherwise "gated" consensus is never- or always-reranking there, and the gate's claims test nothing)."""
    plateau = [convergence(name, c, ev) for name, c in sorted(curves.items())]
    fired = {k: 0.0 < v < 1.0 for k, v in kept_val_fraction.items()}
    shares = ", ".join(f"seed {k}: {v:.3f}" for k, v in kept_val_fraction.items())
    return [combine(CONVERGED, plateau, "held-out loss curves"),
            precondition(GATE, bool(fired) and all(fired.values()),
                         value=sum(fired.values()), threshold=f"all {len(fired)} runs strictly between 0 and 1",
                         detail=f"share of validation queries whose stage-1 list the gate keeps, per training run: {shares}")]


def sum_flips(per_run: list[dict[str, dict]]) -> dict[str, dict]:
    """:func:`rerank_flips` records summed over training runs (the flip rate recomputed from the sums)."""
    out = {}
    for source in per_run[0]:
        tot = {k: sum(r[source][k] for r in per_run) for k in per_run[0][source] if k != "flip_rate"}
        tot["flip_rate"] = round(tot["flipped_to_wrong"] / max(tot["stage1_top1_correct"], 1), 4)
        out[source] = tot
    return out


def best_on_validation(candidates: list[str], val_map: dict[str, float]) -> str:
    """The candidate with the highest validation mAP@10 (ties: the first in ``candidates``)."""
    return max(candidates, key=lambda m: (val_map[m], -candidates.index(m)))


def confidence_separation(stage1_correct: np.ndarray, confidences: dict[str, np.ndarray], agreement: np.ndarray) -> dict:
    """How well each candidate gate confidence tells stage 1's right top-1 answers from its wrong ones: the ROC AUC
    (0.5 = no separation; None when every answer is right or every one wrong), and per view-agreement count the
    queries and how many of them stage 1 answers right at top-1."""
    both = 0 < int(stage1_correct.sum()) < len(stage1_correct)
    return {"auc": {k: float(roc_auc_score(stage1_correct, c)) if both else None for k, c in confidences.items()},
            "by_agreement": {str(int(a)): {"queries": int((agreement == a).sum()),
                                           "stage1_top1_correct": int(stage1_correct[agreement == a].sum())}
                             for a in np.unique(agreement)}}


def rerank_flips(stage1_correct: np.ndarray, new_top1_correct: dict[str, np.ndarray], in_pool: np.ndarray,
                 kept: np.ndarray, top_quartile: np.ndarray, blind_twin: np.ndarray,
                 coarse: np.ndarray | None = None) -> dict[str, dict]:
    """Per source, how often reranking the pool changes a correct stage-1 top-1 into a wrong one
    (and, the other way, fixes a wrong one whose target is in the pool). ``kept``: queries the gate
    judged confident; their flips are the harm the gate exists to prevent. ``top_quartile``: queries
    whose stage-1 confidence is in the top quarter of the validation queries' (whatever the gate
    decided): flips there against fixes there say whether confident stage-1 answers are worth keeping.
    ``blind_twin``: queries whose target has a distractor differing only in what no expert reads
    (``data.BLIND_ATTRS``); flips there are the world's planted case of experts misled. ``coarse``: queries
    whose distractors all agree with the target in every cloze slot (``data.coarse_targets``)."""
    coarse = np.zeros_like(stage1_correct) if coarse is None else coarse
    out = {}
    for source, right in new_top1_correct.items():
        flipped = stage1_correct & ~right
        fixed = ~stage1_correct & in_pool & right
        out[source] = {"stage1_top1_correct": int(stage1_correct.sum()), "flipped_to_wrong": int(flipped.sum()),
                       "flip_rate": round(float(flipped.sum() / max(stage1_correct.sum(), 1)), 4),
                       "fixed": int(fixed.sum()), "net_top1_gain": int(fixed.sum() - flipped.sum()),
                       "flipped_among_confident": int((flipped & kept).sum()),
                       "confident_and_correct": int((stage1_correct & kept).sum()),
                       "top_quartile_queries": int(top_quartile.sum()),
                       "top_quartile_stage1_correct": int((stage1_correct & top_quartile).sum()),
                       "top_quartile_flipped": int((flipped & top_quartile).sum()),
                       "top_quartile_fixed": int((fixed & top_quartile).sum()),
                       "blind_twin_queries": int(blind_twin.sum()),
                       "blind_twin_stage1_correct": int((stage1_correct & blind_twin).sum()),
                       "blind_twin_flipped": int((flipped & blind_twin).sum()),
                       "coarse_queries": int(coarse.sum()),
                       "coarse_stage1_correct": int((stage1_correct & coarse).sum()),
                       "coarse_confident_and_correct": int((stage1_correct & coarse & kept).sum()),
                       "coarse_flipped": int((flipped & coarse).sum()),
                       "coarse_fixed": int((fixed & coarse).sum())}
    return out


def twin_order(scores: dict[str, np.ndarray], pool: np.ndarray, targets: np.ndarray, twins: np.ndarray) -> dict[str, dict]:
    """Per source, on the queries whose target and blind twin (``twins``, −1: none) are both in the pool:
    how often the source scores the target above its twin. A source blind to the landmark is at
    chance (about half); stage 1 can do better, and where it does, reranking can only lose."""
    rows = np.flatnonzero((twins >= 0) & (pool == targets[:, None]).any(1) & (pool == twins[:, None]).any(1))
    t_pos = np.argmax(pool[rows] == targets[rows, None], axis=1)
    w_pos = np.argmax(pool[rows] == twins[rows, None], axis=1)
    return {source: {"pairs_in_pool": len(rows),
                     "target_above_twin": int((v[rows, t_pos] > v[rows, w_pos]).sum())} for source, v in scores.items()}


def claim_specs(best_view: str, best_backbone: str) -> list[ClaimSpec]:
    trained = (CONVERGED,)
    common = dict(table="ap_at_10", metric="AP@10", unit="query", cluster="seed")
    specs = [ClaimSpec(id="fusion_vs_best_single_view", role="headline", method="fusion", baseline=best_view,
                       statement=f"Anchor-constrained multi-view fusion beats the best single view ({best_view}, chosen on "
                                 "validation among the 18 backbone × view branches and the 6 views over all backbones)",
                       preconditions=trained, **common),
             ClaimSpec(id="gated_vs_always_rerank", role="headline", method="fusion+consensus", baseline="fusion+always_rerank",
                       statement="Uncertainty-gated consensus (threshold fitted on validation) beats always reranking with the experts",
                       preconditions=(*trained, GATE), **common),
             ClaimSpec(id="gated_vs_never_rerank", role="headline", method="fusion+consensus", baseline="fusion",
                       statement="Uncertainty-gated consensus (threshold fitted on validation) beats never reranking (fusion alone)",
                       preconditions=(*trained, GATE), **common),
             ClaimSpec(id="fusion_vs_best_backbone", method="fusion", baseline=best_backbone,
                       statement=f"Fusion beats the best single backbone on the full caption ({best_backbone}, chosen on validation)",
                       preconditions=trained, **common)]
    specs += [ClaimSpec(id=f"fusion_vs_{abl}", method="fusion", baseline=abl, statement=f"Fusion beats its ablation {abl}",
                        preconditions=trained, **common) for abl in ABLATIONS]
    return specs
