"""Instruction optimisation loop: grammar round trip, keep-the-best, early stop with patience."""
from __future__ import annotations

import numpy as np
import pytest

from paperworks.insurance import zeroshot as zs

INITIAL = "Rank the candidates by relevance to the query."


def test_initial_instruction_is_in_the_grammar():
    assert zs.render(zs.parse(INITIAL)) == INITIAL
    with pytest.raises(ValueError, match="not expressible"):
        zs.parse("Do something else.")


def test_proposals_are_new_and_close():
    rng = np.random.default_rng(0)
    cur = zs.parse(INITIAL)
    props = zs.propose(cur, 5, {cur}, rng)
    assert len(props) == 5 and cur not in props
    assert all(1 <= sum(a != b for a, b in zip(p, cur)) <= 2 for p in props)


def test_loop_keeps_best_and_stops_with_patience():
    # a synthetic objective: +1 per "medical" word, so the loop has something to find
    def score(text: str) -> float:
        return sum(w in text for w in ("medical", "symptoms", "body site", "patient"))

    res = zs.optimise_instruction(score, INITIAL, max_iterations=50, proposals_per_iteration=3, patience=3, seed=0)
    best = [c["best_score"] for c in res["curve"]]
    assert best == sorted(best)  # best-so-far never drops
    assert res["best_score"] > res["initial_score"]
    assert not any(c["accepted"] for c in res["curve"][-3:])  # stopped after `patience` idle iterations
    assert res["iterations"] < 50


def test_instructed_reranker_conditions_the_query():
    class Enc:
        def __init__(self):
            self.seen = []

        def encode(self, texts, **kw):
            self.seen.extend(texts)
            return np.stack([np.ones(4) / 2 for _ in texts])

    import pandas as pd

    enc = Enc()
    r = zs.InstructedReranker(enc)
    out = r.score_lists("Find things.", pd.DataFrame([{"query": "my knee", "docs": ["a", "b"]}]))
    assert enc.seen[0] == "Instruct: Find things.\nQuery: my knee" and out[0].shape == (2,)
