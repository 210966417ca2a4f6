"""Synthetic benchmark: scale, splits by service, graded labels, lexical gap, determinism."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from paperworks.core.io import write_parquet
from paperworks.insurance import catalogue as cat
from paperworks.insurance.first_stage import tokenize

MIX = {"direct": 0.34, "symptom": 0.33, "coverage": 0.33}


def make(seed=0, n_services=120, n_queries=400, procs=(2, 4)):
    rng = np.random.default_rng(seed)
    services, procedures = cat.build_catalogue(n_services, procs, (0.7, 0.1, 0.2), rng)
    queries = cat.generate_queries(services, procedures, n_queries, MIX, 0.05, 0.15, rng)
    return services, procedures, queries


def test_paper_scale_is_reachable():
    services, procedures, queries = make(n_services=708, n_queries=2647)
    assert len(services) >= 708 and len(procedures) >= 1517 and len(queries) >= 2647
    assert set(queries["intent"]) == set(cat.INTENTS)


def test_splits_never_share_a_service():
    services, procedures, queries = make()
    by_split = {s: set(services.loc[services["split"] == s, "service_id"]) for s in cat.SPLITS}
    assert not (by_split["train"] & by_split["test"]) and not (by_split["train"] & by_split["val"])
    assert not (by_split["val"] & by_split["test"])
    # each query sits in the split of the service holding its best answer
    split_of = services.set_index("service_id")["split"]
    assert (queries["split"].to_numpy() == split_of.loc[queries["service_id"]].to_numpy()).all()
    for split in cat.SPLITS:
        assert set(queries.loc[queries["split"] == split, "service_id"]) <= by_split[split]


def test_grades_come_from_structure():
    _, procedures, queries = make()
    grades = cat.grade_matrix(queries, procedures)
    assert grades.min() >= 0 and grades.max() == 3
    rows = np.arange(len(queries))
    assert (grades[rows, queries["target_procedure_id"].to_numpy()] == 3).all()
    # grade > 0 only at the query's own body site
    site = procedures["site"].to_numpy()
    for i, q in enumerate(queries.itertuples()):
        assert (site[grades[i] > 0] == q.site).all()


def test_symptom_queries_have_a_real_lexical_gap():
    _, procedures, queries = make()
    names = procedures.set_index("procedure_id")["name"]

    def overlap(intent):
        part = queries[queries["intent"] == intent]
        vals = []
        for q in part.itertuples():
            a, b = set(tokenize(q.text)), set(tokenize(names.loc[q.target_procedure_id]))
            vals.append(len(a & b - {"the", "of", "my", "a", "an", "and"}) / max(1, len(b)))
        return float(np.mean(vals))

    assert overlap("symptom") < 0.5 * overlap("direct")


def _digest(tmp_path, name, df, schema):
    path = tmp_path / name
    write_parquet(path, df, schema)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_same_seed_gives_byte_identical_data(tmp_path):
    a, b = make(seed=7), make(seed=7)
    for (da, db), schema, name in zip(zip(a, b), (cat.SERVICES_SCHEMA, cat.PROCEDURES_SCHEMA, cat.QUERIES_SCHEMA),
                                      ("s", "p", "q")):
        assert _digest(tmp_path, f"{name}1.parquet", da, schema) == _digest(tmp_path, f"{name}2.parquet", db, schema)
    c = make(seed=8)
    assert not c[2]["text"].equals(a[2]["text"])


def test_too_many_services_fails_clearly():
    with pytest.raises(ValueError, match="insurance.data.n_services"):
        cat.build_catalogue(10_000, (1, 2), (0.7, 0.1, 0.2), np.random.default_rng(0))


def test_audit_judge_accepts_correct_and_rejects_wrong_site():
    proc = {"site": "knee joint", "family": "arthrocentesis"}
    assert cat.audit_judge("my knee is swollen and puffy", proc)
    assert not cat.audit_judge("my shoulder is swollen and puffy", proc)
    assert not cat.audit_judge("my knee is fine but my hip is swollen and puffy", proc)
