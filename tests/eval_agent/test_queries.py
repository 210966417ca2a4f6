"""Open-ended queries: words → a slice of a dimension's prompt file; its truth is the full benchmark on that slice."""
import numpy as np
import pandas as pd
import pytest

from paperworks.core.claims import EvidenceParams, evaluate_claims, precondition
from paperworks.eval_agent import queries
from paperworks.eval_agent.params import AgentParams, Params, ToolParams, ZooParams
from paperworks.eval_agent.world import PROMPT_COLOURS, build_prompts


def test_parse_query_finds_dimension_slice_and_model_and_refuses_what_it_cannot_place():
    keys = [queries.parse_query(t).key for t in queries.QUERY_TEXTS]
    assert len(set(keys)) == len(keys) == len(PROMPT_COLOURS) + 5
    assert all(k.startswith("colour:") for k in keys[:len(PROMPT_COLOURS)]) and all(k.startswith("count:") for k in keys[-5:])
    q = queries.parse_query("How reliably does B1 draw every red circle?", models=["A0", "B1"])
    assert (q.dim, q.colour, q.shape, q.model) == ("presence", "red", "circle", "B1")
    assert queries.parse_query("is A0 good at putting a thing above another?").dim == "spatial"
    assert queries.parse_query("how noisy are the pictures").dim == "quality"
    assert queries.parse_query("triangles?").dim == "count"  # a shape alone asks the count dimension
    with pytest.raises(ValueError, match="no dimension"):
        queries.parse_query("is it any good?")
    with pytest.raises(ValueError, match="at most one colour"):
        queries.parse_query("red and blue colours")
    with pytest.raises(ValueError, match="several models"):
        queries.parse_query("is A0 better than B1 at counting?", models=["A0", "B1"])
    with pytest.raises(ValueError, match="not in this benchmark"):
        queries.parse_query("how well does it count?", dims=["colour"])


ZOO = ZooParams(dims=["colour", "count"], prompts_per_dim=30, samples_per_prompt=4, n_population=5)


def _world(rng):
    """Benchmark rows for the prompts of ``ZOO``: a model fails every prompt that holds something red, passes the rest
    with its rate; run b is another draw."""
    prompts = build_prompts(ZOO, 0)
    models = [(f"pop{i}", "A", "population", 0.2 + 0.15 * i, ("a",)) for i in range(5)]
    models += [("A0", "A", "in_family", 0.9, ("a", "b")), ("B0", "B", "in_family", 0.5, ("a", "b")), ("C0", "C", "held_out", 0.7, ("a", "b"))]
    rows = []
    for name, fam, role, rate, runs in models:
        for run in runs:
            for b in prompts:
                red = any(it.colour == "red" for it in b.prompt.items)
                for k in range(ZOO.samples_per_prompt):
                    v = int(rng.random() < rate and not (red and name == "A0"))
                    t = v if rng.random() < 0.95 else 1 - v  # the renderer disagrees now and then
                    rows.append((name, fam, role, run, b.dim, b.index, b.stratum, k, v, t))
    cols = ["model", "family", "role", "run", "dim", "prompt", "stratum", "sample", "tool", "truth"]
    return prompts, pd.DataFrame(rows, columns=cols)


def test_open_sessions_score_the_slice_against_its_own_full_benchmark():
    prompts, df = _world(np.random.default_rng(0))
    p = Params(zoo=ZOO, tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(batch_size=4, max_rounds=5, repeats=2))
    s, info = queries.open_sessions(df, prompts, p, seed=3)
    qs = queries.open_queries(p.zoo.dims)
    assert set(info) == {q.key for q in qs}
    red = next(q for q in qs if q.key == "colour:red")
    keep = {b.index for b in prompts if b.dim == "colour" and "red" in {it.colour for it in b.prompt.items}}
    assert info["colour:red"]["prompts"] == len(keep) < 30
    a0 = s[(s["model"] == "A0") & (s["query"] == "colour:red")]
    assert (a0["truth_score"] == 0).all() and (a0[a0["arm"] == "agent"]["estimate"] == 0).all()  # A0 fails every red prompt
    whole = df[(df["model"] == "A0") & (df["run"] == "a") & (df["dim"] == "colour")]["tool"].mean()
    assert whole > 0.3  # … but not the colour dimension as a whole: the slice, not the dimension, is the truth
    for (m, q, rep), g in s.groupby(["model", "query", "repeat"]):
        n = g.set_index("arm")["n"]
        assert n["agent"] == n["random_subset"] <= 20 and n["full_rerun"] == info[q]["samples"] == info[q]["prompts"] * 4
        assert g["truth_score"].nunique() == 1
    units = queries.open_units(s)
    assert set(units["open_within_one"]["cluster"]) == {"A0", "B0"}  # held-out C0 is reported, not in the claims
    assert set(units["open_exact"]["arm"]) == {"agent", "random_subset", "full_rerun"}
    pre = [precondition(n, True) for n in queries.TOOLS_PRE]
    claims = {c["id"]: c for c in evaluate_claims(queries.open_claim_specs(p), units, pre, EvidenceParams(), seed=0, track="eval_agent")}
    assert set(claims) == {"open_query_vs_full_benchmark", "open_query_vs_random_subset"}
    assert claims["open_query_vs_full_benchmark"]["kind"] == "non_inferiority" and claims["open_query_vs_full_benchmark"]["role"] == "exploratory"
    summary = queries.open_summary(s, info)
    assert 0 <= summary["evidence_in_family"]["precision"] <= 1 and summary["per_query"]["colour:red"]["samples"] <= 20
    assert red.matches(next(b for b in prompts if b.index in keep and b.dim == "colour"))
