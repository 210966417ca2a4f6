"""Turn the per-query results of every method into the track's claims and tables."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from paperworks.core.claims import ClaimSpec, EvidenceParams, combine, convergence, learned, precondition, unit_table
from paperworks.core.stats import mean_ci
from paperworks.insurance.params import Params

METRIC_COLS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "mrr", "spearman")


def metric_cols(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c not in ("query_id", "intent")]


def seed_mean(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-query metrics averaged over seeds (queries aligned by id)."""
    base = frames[0].sort_values("query_id").reset_index(drop=True)
    cols = metric_cols(base)
    stacked = np.stack([f.sort_values("query_id")[cols].to_numpy() for f in frames])
    out = base.copy()
    out[cols] = stacked.mean(axis=0)
    return out


def aligned(a: pd.DataFrame, b: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    m = a[["query_id", col]].merge(b[["query_id", col]], on="query_id", suffixes=("_a", "_b"), validate="one_to_one")
    if len(m) != len(a) or len(m) != len(b):
        raise ValueError("methods were scored on different test queries")
    return m[f"{col}_a"].to_numpy(), m[f"{col}_b"].to_numpy()


def summarise(df: pd.DataFrame) -> dict[str, float]:
    return {c: float(df[c].mean()) for c in metric_cols(df)}


def by_intent(methods: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for name, df in methods.items():
        for intent, part in [("all", df), *df.groupby("intent")]:
            rows.append({"method": name, "intent": intent, "n": len(part), **summarise(part)})
    return pd.DataFrame(rows)


def query_units(best_name: str, best_seeds: list[pd.DataFrame], zs_name: str, zeroshot: pd.DataFrame,
                metric: str) -> pd.DataFrame:
    """Per-unit table of a headline claim: one row per (arm, seed, test query).

    The cross-encoder was trained once per seed (the cluster); queries sit inside each seed.
    The zero-shot reranker has no training seed: its per-query scores stand beside each seed's,
    so the comparison is paired by seed and query.
    """
    rows = []
    for seed, frame in enumerate(best_seeds):
        aligned(frame, zeroshot, metric)  # same test queries, or a clear error
        m = frame[["query_id", metric]].merge(zeroshot[["query_id", metric]], on="query_id", suffixes=("_m", "_z"))
        for q, mv, zv in zip(m["query_id"], m[f"{metric}_m"], m[f"{metric}_z"]):
            rows += [{"arm": best_name, "cluster": seed, "unit": q, "value": mv},
                     {"arm": zs_name, "cluster": seed, "unit": q, "value": zv}]
    return unit_table(rows)


PLATEAU = "every cross-encoder's validation NDCG@3 plateaued"


def learned_name(p: Params) -> str:
    return f"every cross-encoder's loss fell ≥ {p.claims.min_loss_improvement:.0%}"


def training_preconditions(records: Mapping[str, dict], p: Params, ev: EvidenceParams) -> list[dict]:
    """Every trained cross-encoder (grid models and every seed of the tuned ones) must have been
    trained until its validation NDCG@3 plateaued (the early-stopping curve, higher is better) and
    must have learned (its training loss left its starting value); the tuned configurations must
    have had the tuning budget the zero-shot baseline had. Optuna's trial models are selection
    tools (many are pruned on purpose) and are not reported, so they are not checked."""
    plateau = [convergence(name, [v for _s, v in r["val_curve"]], ev, lower_is_better=False)
               for name, r in sorted(records.items())]
    moved = [learned(name, r["loss_curve"], p.claims.min_loss_improvement, ev) for name, r in sorted(records.items())]
    return [combine(PLATEAU, plateau, "validation curves"),
            combine(learned_name(p), moved, "training-loss curves"),
            precondition("tuning budget", p.tune.n_trials >= p.claims.min_tune_trials, value=p.tune.n_trials,
                         threshold=p.claims.min_tune_trials,
                         detail=f"{p.tune.n_trials} Optuna trials per tuned configuration (need ≥ {p.claims.min_tune_trials})")]


def claim_specs(p: Params) -> list[ClaimSpec]:
    rests_on = (PLATEAU, learned_name(p), "tuning budget")
    return [ClaimSpec(id=f"tuned_ce_vs_zeroshot_{metric.replace('@', '')}", role="headline", table=f"queries_{metric.replace('@', '')}",
                      metric=metric, method="tuned cross-encoder", baseline="zero-shot (optimised instruction)",
                      unit="query", cluster="seed", preconditions=rests_on,
                      statement=f"The best tuned cross-encoder beats the optimised zero-shot reranker on {metric}")
            for metric in ("ndcg@3", "spearman")]


def grid_table(grid: Mapping[str, tuple[pd.DataFrame, pd.DataFrame, dict]]) -> pd.DataFrame:
    """Every configuration's test means beside its untrained random-head floor (a floor for scale, not a
    claim) and how long early stopping let it train."""
    rows = []
    for name, (base, ft, rec) in sorted(grid.items()):
        rows.append({"config": name, "floor_ndcg@3": float(base["ndcg@3"].mean()), "ft_ndcg@3": float(ft["ndcg@3"].mean()),
                     "floor_spearman": float(base["spearman"].mean()), "ft_spearman": float(ft["spearman"].mean()),
                     "epochs_run": rec["epochs_run"], "steps": rec["steps"], "best_step": rec["best_step"],
                     "stopped_early": rec["stopped_early"]})
    return pd.DataFrame(rows)


def seeds_table(seed_summary: dict) -> pd.DataFrame:
    rows = []
    for c in seed_summary["configs"]:
        for metric in c["test"][0]:
            vals = [s[metric] for s in c["test"]]
            ci = mean_ci(vals)
            rows.append({"config": c["config"], "metric": metric, "mean": ci["mean"], "std": ci["std"], "n_seeds": len(vals)})
    return pd.DataFrame(rows)
