"""Tests that bite on bugs an independent reviewer planted in the shared core (ranking, io, params).

Each one was checked by planting its bug and seeing it fail. References are independent:
scikit-learn's ``ndcg_score``, AP@k written out by hand, Spearman as Pearson of average ranks.
"""
from __future__ import annotations

import copy

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from sklearn.metrics import ndcg_score

from paperworks.core import ranking
from paperworks.core.io import ArtifactError, atomic_path, load_safetensors, read_parquet, save_safetensors
from paperworks.core.params import track_models, validate_all
from tests.conftest import REPO

# ------------------------------------------------------------------ ranking


def test_ndcg_ideal_comes_from_all_judged_items_not_the_ranked_list() -> None:
    """A relevant item the retriever never returned must lower NDCG (ideal from ``all_rels``)."""
    returned = [2.0, 1.0]  # the retriever's top 2, in its order
    judged = [2.0, 1.0, 2.0]  # a third item, also grade 2, was never returned
    ours = ranking.ndcg_at_k(returned, 2, all_rels=judged)
    # by hand: DCG = 2 + 1/log2(3); ideal = [2, 2] -> 2 + 2/log2(3)
    assert ours == pytest.approx((2 + 1 / math.log2(3)) / (2 + 2 / math.log2(3)), abs=1e-12)
    assert ours < 1.0
    # scikit-learn on the full judged set: the missing item scored below everything returned
    assert ours == pytest.approx(ndcg_score([judged], [[3.0, 2.0, -1.0]], k=2), abs=1e-12)


def test_ndcg_relevant_item_ranked_beyond_k_lowers_the_score() -> None:
    """The ideal ranking uses every relevant item, including the ones ranked past k."""
    ranked = [1.0, 0.0, 0.0, 2.0]  # the best item is ranked 4th, outside the top 2
    ours = ranking.ndcg_at_k(ranked, 2)
    assert ours == pytest.approx(1.0 / (2 + 1 / math.log2(3)), abs=1e-12)  # ideal top 2 = [2, 1]
    assert ours == pytest.approx(ndcg_score([ranked], [[4.0, 3.0, 2.0, 1.0]], k=2), abs=1e-12)
    # the same list with the grade-2 item ranked first is perfect: position matters
    assert ranking.ndcg_at_k([2.0, 1.0, 0.0, 0.0], 2) == pytest.approx(1.0)


def _ap_at_k_by_hand(ranked: list[int], k: int, n_relevant: int) -> float:
    hits, total = 0, 0.0
    for i, r in enumerate(ranked[:k], start=1):
        if r:
            hits += 1
            total += hits / i
    return total / min(k, n_relevant) if n_relevant else 0.0


def test_ap_at_k_divides_by_min_of_k_and_relevant_count() -> None:
    """Four relevant items, all in the top 2 slots: AP@2 is perfect, not 2/4."""
    assert ranking.average_precision_at_k([1, 1, 1, 1], 2, n_relevant=4) == pytest.approx(1.0)
    assert ranking.average_precision_at_k([1, 0, 1, 1, 1], 3, n_relevant=6) == pytest.approx((1 + 2 / 3) / 3)
    rng = np.random.default_rng(4)
    for _ in range(200):
        ranked = rng.integers(0, 2, int(rng.integers(1, 12))).tolist()
        n_rel = sum(ranked) + int(rng.integers(0, 3))  # some relevant items may be unretrieved
        for k in (1, 3, 5, 10):
            assert ranking.average_precision_at_k(ranked, k, n_relevant=n_rel) == pytest.approx(
                _ap_at_k_by_hand(ranked, k, n_rel), abs=1e-12)


def test_ap_at_k_counts_relevant_items_beyond_k_when_not_told() -> None:
    """Without ``n_relevant`` the relevant count comes from the whole list, as in ``recall_at_k``."""
    ranked = [0, 1, 0, 1]  # two relevant items, one of them past k=2
    assert ranking.average_precision_at_k(ranked, 2) == pytest.approx(_ap_at_k_by_hand(ranked, 2, 2))  # 0.25
    assert ranking.average_precision_at_k(ranked, 2) == ranking.average_precision_at_k(ranked, 2, n_relevant=2)


def _spearman_by_hand(x, y) -> float:
    """Pearson correlation of average ranks (ties share the mean of their ranks)."""
    def avg_rank(v):
        v = np.asarray(v, dtype=float)
        return np.array([(v < a).sum() + ((v == a).sum() + 1) / 2 for a in v])
    rx, ry = avg_rank(x), avg_rank(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def test_spearman_is_rank_correlation_not_pearson() -> None:
    """A monotone but non-linear relation is a perfect rank correlation (Pearson would be < 1)."""
    x = np.arange(1.0, 9.0)
    assert ranking.spearman(x, np.exp(x)) == pytest.approx(1.0, abs=1e-12)
    assert ranking.spearman(x, -(x ** 4)) == pytest.approx(-1.0, abs=1e-12)
    assert np.corrcoef(x, np.exp(x))[0, 1] < 0.9  # the case really separates the two
    scores = [0.1, 5.0, 0.3, 100.0, 2.0, 2.0]
    grades = [0, 2, 1, 3, 1, 2]  # ties on both sides
    assert ranking.spearman(scores, grades) == pytest.approx(_spearman_by_hand(scores, grades), abs=1e-12)


# ------------------------------------------------------------------ atomic_path


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_atomic_path_removes_its_temporary_on_exception(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(target) as tmp:
            if kind == "dir":
                tmp.mkdir()
                (tmp / "part").write_text("half")
            else:
                tmp.write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == [], "the temporary must be gone right after the failed write"
    assert not target.exists()


def test_atomic_path_refuses_to_publish_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old complete output")
    with pytest.raises(ArtifactError, match=r"out\.txt.*nothing was written"):
        with atomic_path(target):
            pass  # the body forgot to write
    assert target.read_text() == "old complete output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with pytest.raises(ArtifactError, match="nothing was written"):  # a new target is not created either
        with atomic_path(tmp_path / "new.txt"):
            pass
    assert not (tmp_path / "new.txt").exists()


# ------------------------------------------------------------------ checked readers

SCHEMA = pa.schema([("theta", pa.float64()), ("action", pa.float32())])


@pytest.mark.parametrize("wrong", [pa.int64(), pa.string(), pa.float32()])
def test_read_parquet_rejects_a_column_of_the_wrong_type(tmp_path: Path, wrong: pa.DataType) -> None:
    values = {pa.int64(): [1, 2], pa.string(): ["0.1", "0.2"], pa.float32(): [0.1, 0.2]}[wrong]
    table = pa.table({"theta": pa.array(values, type=wrong), "action": pa.array([1.0, -1.0], type=pa.float32())})
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path)  # written by someone who did not go through write_parquet
    with pytest.raises(ArtifactError, match=rf"typed\.parquet: column 'theta' has type {wrong}, expected double"):
        read_parquet(path, SCHEMA)
    good = tmp_path / "good.parquet"
    pq.write_table(table.set_column(0, "theta", pa.array([0.1, 0.2], type=pa.float64())), good)
    assert read_parquet(good, SCHEMA)["theta"].tolist() == [0.1, 0.2]


def test_load_safetensors_rejects_extra_tensors(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"w": torch.zeros(4, 3), "b": torch.zeros(3), "lora_A": torch.zeros(2, 3)})
    with pytest.raises(ArtifactError, match=r"w\.safetensors: .*unexpected tensors \['lora_A'\]"):
        load_safetensors(path, {"w": (4, 3), "b": (3,)})
    assert set(load_safetensors(path, {"w": (4, 3), "b": (3,), "lora_A": (2, 3)})) == {"w", "b", "lora_A"}


# ------------------------------------------------------------------ params


def test_validate_all_rejects_an_unknown_top_level_section(tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    track = sorted(track_models())[0]
    # a typo'd track name: its settings would silently be ignored (a copy, not the same object:
    # yaml would write a shared object as an alias, which params files refuse)
    params[track + "x"] = copy.deepcopy(params[track])
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    errors = validate_all(f)
    assert len(errors) == 1 and f"{track}x: unknown section" in errors[0]
    del params[track + "x"]
    f.write_text(yaml.safe_dump(params))
    assert validate_all(f) == []
