"""Bad inputs fail with a message naming the item."""
from __future__ import annotations

import pandas as pd
import pytest

from paperworks.core.io import ArtifactError, write_parquet
from paperworks.insurance import first_stage as fs


def lists(**override):
    row = {"query_id": 7, "query": "my knee hurts", "intent": "symptom", "split": "test",
           "procedure_ids": [1, 2], "docs": ["arthrocentesis of the knee joint", "x-ray of the hip"], "labels": [3.0, 0.0]}
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
