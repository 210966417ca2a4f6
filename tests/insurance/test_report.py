"""Claims: paired over test queries; every-config-vs-base counts."""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.insurance import report as rp


def frame(values, ids=None):
    ids = ids if ids is not None else list(range(len(values)))
    return pd.DataFrame({"query_id": ids, "intent": ["direct"] * len(values), "ndcg@3": values, "spearman": values})


def test_seed_mean_aligns_by_query():
    a = frame([1.0, 0.0], ids=[5, 6])
    b = frame([0.0, 1.0], ids=[6, 5])
    m = rp.seed_mean([a, b])
    assert m["ndcg@3"].tolist() == [1.0, 0.0]


def test_headline_claims_pair_over_queries():
    rng = np.random.default_rng(0)
    base = rng.random(60)
    claims = rp.headline_claims("ft", frame(base + 0.2), "zs", frame(base), seed=0)
    assert [c["metric"] for c in claims] == ["ndcg@3", "spearman"]
    assert all(c["verdict"] == "method better" and c["n"] == 60 for c in claims)


def test_config_vs_base_counts():
    rng = np.random.default_rng(1)
    grid = {}
    for i in range(4):
        base = rng.random(40)
        grid[f"c{i}"] = (frame(base), frame(base + (0.3 if i < 3 else -0.3)))
    pooled, per, table = rp.config_vs_base(grid, seed=0)
    assert pooled["improved_count"] == 3 and pooled["significant_count"] == 3 and pooled["configs"] == 4
    assert len(per) == 4 and table["verdict"].tolist()[-1] == "baseline better"
