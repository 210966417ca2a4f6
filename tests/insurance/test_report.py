"""Per-unit tables and preconditions of the insurance claims."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from paperworks.insurance import report as rp


def frame(values, ids=None):
    ids = ids if ids is not None else list(range(len(values)))
    return pd.DataFrame({"query_id": ids, "intent": ["direct"] * len(values), "ndcg@3": values, "spearman": values})


def test_seed_mean_aligns_by_query():
    a = frame([1.0, 0.0], ids=[5, 6])
    b = frame([0.0, 1.0], ids=[6, 5])
    m = rp.seed_mean([a, b])
    assert m["ndcg@3"].tolist() == [1.0, 0.0]


def test_query_units_nest_queries_in_seeds_and_pair_the_zero_shot():
    rng = np.random.default_rng(0)
    base = rng.random(60)
    seeds = [frame(base + 0.2 + 0.01 * k) for k in range(3)]
    units = rp.query_units("ft", seeds, "zs", frame(base), "ndcg@3")
    assert len(units) == 2 * 3 * 60 and set(units["cluster"]) == {"0", "1", "2"}
    ft = units[units["arm"] == "ft"].set_index(["cluster", "unit"])["value"]
    zs = units[units["arm"] == "zs"].set_index(["cluster", "unit"])["value"]
    assert np.allclose((ft - zs).groupby(level=0).mean().to_numpy(), [0.2, 0.21, 0.22])
    with pytest.raises(ValueError, match="different test queries"):
        rp.query_units("ft", [frame(base[:50])], "zs", frame(base), "ndcg@3")


def test_preconditions_read_the_validation_plateau_and_the_training_loss():
    """A model whose validation NDCG@3 still climbs was stopped too early; a flat loss (ListNet at ln 6
    throughout, the landed grid) did not learn — each fails its own check and is named."""
    from paperworks.core.claims import EvidenceParams
    from paperworks.insurance.params import Params
    from paperworks.core.params import load_section
    from tests.conftest import REPO

    p = load_section("insurance", Params, REPO / "params.yaml")
    rng = np.random.default_rng(2)
    steps = list(range(0, 200, 10))
    plateau = [[s, 0.7 - 0.3 * np.exp(-s / 20)] for s in steps]
    climbing = [[s, 0.3 + 0.002 * s] for s in steps]
    learns = list(1.8 * np.exp(-np.arange(200) / 30) + 0.5)
    records = {"good": {"val_curve": plateau, "loss_curve": learns},
               "flat": {"val_curve": plateau, "loss_curve": list(np.log(6) + rng.normal(0, 0.003, 200))},
               "cut_short": {"val_curve": climbing, "loss_curve": learns}}
    pre = {r["name"]: r for r in rp.training_preconditions(records, p, EvidenceParams())}
    plat = pre[rp.PLATEAU]
    assert not plat["passed"] and "cut_short" in plat["detail"] and plat["value"] == 2
    moved = pre[rp.learned_name(p)]
    assert not moved["passed"] and "flat" in moved["detail"] and moved["value"] == 2
    both_good = rp.training_preconditions({"good": records["good"]}, p, EvidenceParams())
    assert all(r["passed"] for r in both_good[:2])
