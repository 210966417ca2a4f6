"""Sessions on a synthetic benchmark: the truth is run a, every arm reads run b, the controls match the agent's samples."""
import numpy as np
import pandas as pd

from paperworks.eval_agent import report
from paperworks.eval_agent.params import AgentParams, Params, ToolParams, ZooParams


def _outcomes(rng):
    rows = []
    models = [(f"pop{i}", "A", "population", 0.1 + 0.2 * i, ("a",)) for i in range(5)]
    models += [("A0", "A", "in_family", 0.8, ("a", "b")), ("B0", "B", "in_family", 0.3, ("a", "b")), ("C0", "C", "held_out", 0.5, ("a", "b"))]
    for name, fam, role, rate, runs in models:
        for run in runs:
            r = rate if run == "a" else rate * 0.5  # run b is a different draw: here deliberately lower
            for prompt in range(20):
                for sample in range(4):
                    v = int(rng.random() < r)
                    rows.append((name, fam, role, run, "colour", prompt, prompt % 2, sample, v, v))
    return pd.DataFrame(rows, columns=["model", "family", "role", "run", "dim", "prompt", "stratum", "sample", "tool", "truth"])


def test_truth_is_run_a_and_every_arm_reads_run_b_at_the_agents_sample_count():
    df = _outcomes(np.random.default_rng(0))
    p = Params(zoo=ZooParams(dims=["colour"], prompts_per_dim=20, samples_per_prompt=4, n_population=5),
               tools=ToolParams(n_train=16, n_heldout=32, steps=10), agent=AgentParams(batch_size=8, max_rounds=5, repeats=3))
    s, edges, examples = report.run_sessions(df, p, seed=1)
    assert len(s) == 3 * 1 * 3 * 4  # (A0, B0, C0) × 1 dimension × 3 repeats × 4 arms
    for m in ("A0", "B0", "C0"):
        a = df[(df.model == m) & (df.run == "a")]["tool"].mean()
        b = df[(df.model == m) & (df.run == "b")]["tool"].mean()
        sm = s[s.model == m]
        assert np.allclose(sm["truth_score"], a)
        assert np.allclose(sm[sm.arm == "full_rerun"]["estimate"], b) and (sm[sm.arm == "full_rerun"]["n"] == 80).all()
        for rep in range(3):
            n = sm[(sm.repeat == rep)].set_index("arm")["n"]
            assert n["agent"] == n["random_subset"] == n["first_n"] <= 40
    for arm in ("random_subset", "first_n"):  # each control's score is a count of passes out of exactly n samples
        c = s[s.arm == arm]
        assert np.allclose(c["estimate"] * c["n"], np.round(c["estimate"] * c["n"]))
    assert len(edges["colour"]) == 6 and examples and examples[0]["samples"] == examples[0]["rounds"][-1]["n"]
    units = report.session_units(s)
    assert set(units["exact"]["cluster"]) == {"A0", "B0"} and set(units["exact_heldout"]["cluster"]) == {"C0"}


def test_comparison_and_recommendation_modes_score_against_the_truth():
    """An arm whose estimates are the truth is always right; one whose estimates reverse the order is always wrong."""
    rows = []
    truth = {("A0", "colour"): 0.9, ("A1", "colour"): 0.5, ("B0", "colour"): 0.2,
             ("A0", "count"): 0.1, ("A1", "count"): 0.6, ("B0", "count"): 0.3}
    for (m, d), t in truth.items():
        for rep in range(2):
            for arm, est in (("agent", t), ("random_subset", 1 - t), ("first_n", 0.5), ("full_rerun", t + 0.01)):
                rows.append({"model": m, "role": "in_family", "dim": d, "repeat": rep, "arm": arm, "estimate": est, "truth_score": t})
    rows.append({"model": "C0", "role": "held_out", "dim": "colour", "repeat": 0, "arm": "agent", "estimate": 0.0, "truth_score": 1.0})
    tables, summary = report.mode_units(pd.DataFrame(rows), ["colour", "count"], seed=3)
    cmp = tables["comparison"].groupby("arm")["value"].mean()
    assert cmp["agent"] == cmp["full_rerun"] == 1.0 and cmp["random_subset"] == 0.0 and cmp["first_n"] == 0.5  # ties count half
    assert len(tables["comparison"]) == 4 * 2 * 2  # arms × dims × repeats (held-out models never enter)
    hit = tables["recommendation_hit"].groupby("arm")["value"].mean()
    regret = tables["recommendation_regret"].groupby("arm")["value"]
    assert hit["agent"] == 1.0 and regret.max()["agent"] == 0.0 and regret.min()["random_subset"] > 0
    assert len(tables["recommendation_hit"]) == 4 * 2 * report.N_NEEDS and set(tables["recommendation_hit"]["cluster"]) == {"r0", "r1"}
    assert summary["agent"]["comparison_accuracy"] == 1.0 and summary["random_subset"]["recommendation_hit"] < 1.0
    w = report.needs(["colour", "count"], 3)
    assert w.shape == (report.N_NEEDS, 2) and np.allclose(w.sum(1), 1) and np.array_equal(w, report.needs(["colour", "count"], 3))
