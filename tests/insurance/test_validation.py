"""Bad inputs fail with a message naming the item."""
from __future__ import annotations

import pandas as pd
import pytest

from paperworks.core.io import ArtifactError, write_parquet
from paperworks.insurance import first_stage as fs


def lists(**override):
    row = {"query_id": 7, "query": "my knee hurts", "intent": "symptom", "split": "test",
           "procedure_ids": [1, 2], "docs": ["arthrocentesis of the knee joint", "x-ray of the hip"], "labels": [3.0, 0.0],
           "ideal_labels": [3.0, 2.0]}
    row.update(override)
    return pd.DataFrame([row])


def test_good_lists_pass():
    fs.validate_lists(lists(), "t")


def test_empty_query_text_names_the_query():
    with pytest.raises(ArtifactError, match="query 7 has empty text"):
        fs.validate_lists(lists(query="  "), "t")


def test_empty_procedure_text_names_the_procedure():
    with pytest.raises(ArtifactError, match="procedure 2 has empty text"):
        fs.validate_lists(lists(docs=["arthrocentesis", ""]), "t")


def test_list_without_relevant_candidate_names_the_query():
    with pytest.raises(ArtifactError, match="query 7 has no relevant candidate"):
        fs.validate_lists(lists(labels=[1.0, 0.0]), "t", relevant_grade=2)


def test_ideal_labels_below_the_list_are_rejected():
    with pytest.raises(ArtifactError, match="query 7: ideal_labels must hold the query's best grades"):
        fs.validate_lists(lists(ideal_labels=[2.0, 0.0]), "t")


def test_check_texts_names_the_row():
    df = pd.DataFrame({"procedure_id": [3, 4], "name": ["ok", ""]})
    with pytest.raises(ArtifactError, match="procedure_id 4 has empty name"):
        fs.check_texts(df, "procedure_id", "name", "procedures")


def test_read_lists_rejects_wrong_schema(tmp_path):
    import pyarrow as pa

    path = tmp_path / "l.parquet"
    write_parquet(path, pd.DataFrame({"query_id": [1]}), pa.schema([("query_id", pa.int32())]))
    with pytest.raises(ArtifactError, match="missing column"):
        fs.read_lists(path)
    path.write_bytes(b"not parquet")
    with pytest.raises(ArtifactError, match="corrupt"):
        fs.read_lists(path)


def test_first_stage_lists_drop_misses_and_keep_order():
    import numpy as np

    queries = pd.DataFrame({"query_id": [0, 1], "text": ["a", "b"], "intent": ["direct"] * 2, "split": ["test"] * 2})
    procedures = pd.DataFrame({"name": ["p0", "p1", "p2"]})
    fused = np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]])
    grades = np.array([[3, 0, 1], [0, 3, 0]])
    out, misses = fs.build_lists(queries, procedures, fused, grades, list_size=2, relevant_grade=2)
    # query 0: top-2 is p1 (grade 0), p2 (grade 1): a first-stage miss; query 1 keeps fused order p0, p1
    assert misses == 1
    assert out["query_id"].tolist() == [1]
    assert out["docs"].tolist() == [["p0", "p1"]] and out["labels"].tolist() == [[0.0, 3.0]]
    assert out["ideal_labels"].tolist() == [[3.0, 0.0]]  # the query's best grades over the catalogue


def test_fusion_is_chosen_by_the_share_of_lists_keeping_a_relevant_candidate():
    import numpy as np

    # 3 queries, 4 procedures: BM25 finds the relevant one for queries 0 and 1, the bi-encoder for query 2
    bm25 = np.array([[9.0, 1, 0, 0], [9.0, 1, 0, 0], [9.0, 1, 0, 0]])
    dense = np.array([[0.0, 1, 2, 3], [0.0, 1, 2, 3], [0.0, 1, 2, 3]])
    grades = np.array([[3, 0, 0, 0], [2, 0, 0, 0], [0, 0, 0, 3]])
    best, table = fs.choose_fusion(bm25, dense, grades, list_size=1, relevant_grade=2, rrf_ks=[10], bm25_weights=[0.2, 0.8])
    assert best["bm25_weight"] == 0.8 and best["hit_share"] == 2 / 3
    assert {r["bm25_weight"]: r["hit_share"] for r in table} == {0.2: 1 / 3, 0.8: 2 / 3}
    # weighted RRF: with equal weights it is the plain reciprocal-rank sum
    assert np.allclose(fs.rrf_scores(bm25, dense, k=5, weights=(1.0, 1.0)), fs.rrf_scores(bm25, dense, k=5))
