"""Turn the per-query results of every method into the track's claims and tables."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from paperworks.core.stats import claim, mean_ci

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


def headline_claims(best_name: str, best: pd.DataFrame, zs_name: str, zeroshot: pd.DataFrame, seed: int) -> list[dict]:
    out = []
    for metric in ("ndcg@3", "spearman"):
        m, b = aligned(best, zeroshot, metric)
        out.append(claim(f"best fine-tuned cross-encoder beats the optimised instructed zero-shot reranker on {metric}",
                         metric, best_name, m, zs_name, b, paired=True, unit="test query (seed-mean)", seed=seed))
    return out


def config_vs_base(grid: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]], seed: int) -> tuple[dict, list[dict], pd.DataFrame]:
    """Every configuration against its own untrained base: pooled claim, per-config claims, table."""
    per_config, rows = [], []
    ft_means, base_means = [], []
    for name, (base, ft) in sorted(grid.items()):
        m, b = aligned(ft, base, "ndcg@3")
        c = claim(f"{name} improves on its base checkpoint", "ndcg@3", f"{name} fine-tuned", m, f"{name} base", b,
                  unit="test query", seed=seed)
        per_config.append(c)
        improved_all = all(ft[k].mean() > base[k].mean() for k in metric_cols(ft))
        rows.append({"config": name, "base_ndcg@3": float(b.mean()), "ft_ndcg@3": float(m.mean()),
                     "base_spearman": float(base["spearman"].mean()), "ft_spearman": float(ft["spearman"].mean()),
                     "diff_ndcg@3": c["diff"], "ci_low": c["diff_ci95"][0], "ci_high": c["diff_ci95"][1],
                     "verdict": c["verdict"], "improved_every_metric": improved_all})
        ft_means.append(float(m.mean()))
        base_means.append(float(b.mean()))
    pooled = claim("every grid configuration improves on its base checkpoint (paired over configurations)", "ndcg@3",
                   "fine-tuned", ft_means, "base", base_means, unit="grid configuration", seed=seed)
    table = pd.DataFrame(rows)
    pooled["improved_count"] = int((table["diff_ndcg@3"] > 0).sum())
    pooled["significant_count"] = int((table["verdict"] == "method better").sum())
    pooled["improved_every_metric_count"] = int(table["improved_every_metric"].sum())
    pooled["configs"] = len(table)
    return pooled, per_config, table


def seeds_table(seed_summary: dict) -> pd.DataFrame:
    rows = []
    for c in seed_summary["configs"]:
        for metric in c["test"][0]:
            vals = [s[metric] for s in c["test"]]
            ci = mean_ci(vals)
            rows.append({"config": c["config"], "metric": metric, "mean": ci["mean"], "std": ci["std"], "n_seeds": len(vals)})
    return pd.DataFrame(rows)
