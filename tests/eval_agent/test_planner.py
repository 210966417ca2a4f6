"""The trained planner's machinery: step records replay the scripted agent exactly, actions are validated,
refused actions are retried and fall back with a count, and rollouts join the agent's sessions."""
import json

import numpy as np
import pandas as pd
import pytest

from paperworks.core.io import ArtifactError
from paperworks.eval_agent.agent import Pool, run_agent
from paperworks.eval_agent.params import AgentParams
from paperworks.eval_agent.planner import (REFUSALS, StepState, fallback_action, parse_action, refusal_kind, rollout, scripted_records,
                                           validate)

EDGES = (0.0, 0.3, 0.5, 0.7, 0.85, 1.0)


def _smoke_params():
    from paperworks.core.params import validate_section
    from paperworks.core.profile import compose
    from paperworks.eval_agent.params import Params
    from tests.eval_agent.test_params import CONF

    return validate_section("eval_agent", Params, compose("smoke", CONF)["eval_agent"])


def _pool(rates, per=40, seed=0):
    rng = np.random.default_rng(seed)
    strata = np.repeat(np.arange(len(rates)), per)
    outcome = (rng.random(len(strata)) < np.asarray(rates)[strata]).astype(float)
    return Pool(np.arange(len(strata)), np.zeros(len(strata), int), strata, outcome)


@pytest.mark.parametrize("rates,seed", [([0.9, 0.5, 0.2, 0.7], 1), ([0.95, 0.97], 2), ([0.6, 0.1, 0.4], 3)])
def test_scripted_steps_replay_run_agent(rates, seed):
    """Unrolling a session into step records, then executing their actions, is run_agent's session."""
    pool, p = _pool(rates, seed=seed), AgentParams(batch_size=8, max_rounds=6)
    w = np.full(len(rates), 1 / len(rates))
    ref = run_agent(pool, w, EDGES, p, np.random.default_rng(seed))
    s = StepState.start(pool, w, EDGES, p, np.random.default_rng(seed))
    records = scripted_records(s, "count", tuple(f"a{i}" for i in range(len(rates))))
    assert s.rows == ref.rows and s.level == ref.level and s.reason == ref.reason and s.round == ref.rounds
    assert len(records) == ref.rounds + 1  # one decision before each round, and the stop
    sampled = [json.loads(r["action"])["n"] for r in records[:-1]]
    assert sampled == [st["allocation"] for st in ref.steps]
    assert json.loads(records[-1]["action"])["action"] == "stop"
    assert all(r["prompt"] == "\n".join([r["instruction"], r["history"], r["observation"]]) + "\n" for r in records)
    assert "obs: nothing read" in records[0]["observation"] and "round 1/6" in records[1]["observation"]


def test_validate_refuses_actions_outside_the_allowed_set():
    p = AgentParams(batch_size=8, max_rounds=2)
    s = StepState.start(_pool([0.5, 0.5], per=10), np.array([0.5, 0.5]), EDGES, p, np.random.default_rng(0))
    assert validate({"action": "sample", "n": [4, 4]}, s) == ""
    assert validate({"action": "stop", "level": "High"}, s) == ""
    kinds = set()
    for bad in (None, {"action": "sample", "n": [5, 4]}, {"action": "sample", "n": [8]}, {"action": "sample", "n": [9, -1]},
                {"action": "sample", "n": [4.0, 4]}, {"action": "sample", "n": [True, 7]}, {"action": "sample", "n": [4, 4], "x": 1},
                {"action": "stop", "level": "Superb"}, {"action": "jump"}, {"action": "sample", "n": [8, 0, 0]}):
        assert validate(bad, s) != "", bad
        kinds.add(refusal_kind(validate(bad, s)))
    s.apply({"action": "sample", "n": [8, 0]})
    assert refusal_kind(validate({"action": "sample", "n": [3, 5]}, s)) == "more than a sub-aspect has left"  # stratum 0 has 2 left
    s.apply({"action": "sample", "n": [2, 6]})
    assert s.must_stop() and "cap" in validate({"action": "sample", "n": [0, 4]}, s)
    kinds.add(refusal_kind(validate({"action": "sample", "n": [0, 4]}, s)))
    assert kinds == set(REFUSALS.values()) - {"more than a sub-aspect has left"}  # every kind but one met here (above)
    with pytest.raises(ValueError, match="unknown refusal"):
        refusal_kind("the planner was rude")
    assert fallback_action(s)["action"] == "stop"
    assert parse_action('think: stop\n{"action":"stop","level":"Low"}') == {"action": "stop", "level": "Low"}
    assert parse_action("think\n{broken") is None and parse_action("[1, 2]") is None


def test_untrained_planner_rollout_counts_every_refused_action():
    """A random tiny LM emits no valid action: every decision is refused, retried, falls back, and is counted."""
    from paperworks.core.lm import LMConfig, build_model, train_tokenizer

    tok = train_tokenizer(['{"action":"stop","level":"High"} think: obs task 0123456789[],/-. abcdefghijklmnopqrstuvwxyz'])
    model = build_model(LMConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_positions=256), len(tok), seed=0)
    p = AgentParams(batch_size=4, max_rounds=3)
    states = [StepState.start(_pool([0.5, 0.6], per=8, seed=k), np.array([0.5, 0.5]), EDGES, p, np.random.default_rng(k)) for k in range(3)]
    counts, log = rollout(model, tok, states, ["colour"] * 3, [("a", "b")] * 3, max_new_tokens=12, seed=0)
    assert all(s.done and s.round == 3 and len(s.rows) == 12 for s in states)  # fallback: proportional rounds, then stop at the cap
    assert all(c == {"decisions": 4, "invalid": 4, "retried_ok": 0, "fallbacks": 4} for c in counts)
    assert len(log) == 12 and all(e["why"] and e["outcome"] == "fallback" for e in log)
    assert all(s.level == s.decision.level for s in states)


def test_rollouts_with_inconsistent_counts_are_refused(tmp_path):
    from paperworks.core.io import write_parquet
    from paperworks.eval_agent.artifacts import ROLLOUT_SCHEMA, read_rollouts

    row = {"model": "A0", "family": "A", "role": "in_family", "dim": "count", "repeat": 0, "level": 2, "n": 16, "estimate": 0.5,
           "rounds": 2, "reason": "cap", "decisions": 3, "invalid": 2, "retried_ok": 1, "fallbacks": 1}
    write_parquet(tmp_path / "rollouts.parquet", pd.DataFrame([row]), ROLLOUT_SCHEMA)
    assert len(read_rollouts(tmp_path)) == 1
    write_parquet(tmp_path / "rollouts.parquet", pd.DataFrame([{**row, "fallbacks": 0}]), ROLLOUT_SCHEMA)  # an invalid action vanished
    with pytest.raises(ArtifactError, match="rollouts.parquet"):
        read_rollouts(tmp_path)


def test_action_record_must_agree_with_the_rollouts(tmp_path):
    from paperworks.core.io import write_json
    from paperworks.eval_agent.inputs import read_actions, read_tool_accuracy

    roll = pd.DataFrame({"decisions": [4, 3], "invalid": [2, 0], "retried_ok": [1, 0], "fallbacks": [1, 0]})
    good = {"records": {"train": 5, "heldout": 1}, "decisions": 7, "invalid": 2, "retried_ok": 1, "fallbacks": 1,
            "refusals": {"not JSON": {"first_try": 1, "retry": 1}, "wrong total": {"first_try": 1, "retry": 0}}, "invalid_log": []}
    write_json(tmp_path / "actions.json", good)
    assert read_actions(roll, tmp_path)["invalid"] == 2
    for bad, match in (({**good, "fallbacks": 0}, "fallbacks = 0 but rollouts"),  # a fallback vanished from the record
                       ({**good, "refusals": {"not JSON": {"first_try": 2, "retry": 0}}}, "refusals count 2 first tries / 0"),
                       ({k: v for k, v in good.items() if k != "refusals"}, "missing keys"),
                       ({**good, "refusals": [1]}, "not a")):
        write_json(tmp_path / "actions.json", bad)
        with pytest.raises(ArtifactError, match=match):
            read_actions(roll, tmp_path)
    write_json(tmp_path / "accuracy.json", {"per_family": {"A": {"count": 1.3}}})
    with pytest.raises(ArtifactError, match="per_family"):
        read_tool_accuracy(tmp_path)


def _planner_frame(seeds, invalid_by_seed):
    rows = []
    for s in seeds:
        for model, role in (("A0", "in_family"), ("C0", "held_out")):
            for rep in range(3):
                rows.append({"model": model, "dim": "colour", "repeat": rep, "role": role, "planner_seed": s,
                             "planner_within_one": float(rep != s), "agent_within_one": 1.0, "decisions": 10,
                             "invalid": invalid_by_seed.get(s, 0), "retried_ok": invalid_by_seed.get(s, 0), "fallbacks": 0})
    return pd.DataFrame(rows)


def test_planner_claims_cluster_on_training_draws():
    from paperworks.eval_agent import report

    ps = _planner_frame([0, 1], {})
    u = report.planner_units(ps)["planner_within_one"]
    assert set(u["cluster"]) == {"seed_0", "seed_1"} and len(u) == 2 * 2 * 3  # arms × draws × sessions
    mine = u[(u["arm"] == "planner") & (u["cluster"] == "seed_1")].sort_values("unit")["value"].tolist()
    assert mine == [1.0, 0.0, 1.0]  # draw 1 misses repeat 1 only
    assert all(s.cluster == "seed" for s in report.planner_claim_specs(_smoke_params()))


def test_every_planner_draw_must_converge_and_act_validly():
    from paperworks.core.claims import EvidenceParams
    from paperworks.eval_agent import report

    flat = list(np.linspace(2.0, 1.0, 30)) + [1.0] * 30
    falling = list(np.linspace(2.0, 0.2, 60))
    pre = {r["name"]: r for r in report.planner_preconditions(_planner_frame([0, 1], {1: 5}), {0: flat, 1: flat}, _smoke_params(),
                                                               EvidenceParams())}
    assert pre[report.PLANNER_CONVERGED]["passed"] and pre[report.PLANNER_LEARNED]["passed"]
    # draw 1 refuses 5 of 10 first tries in every session: the worst draw decides
    assert not pre[report.PLANNER_VALID]["passed"] and pre[report.PLANNER_VALID]["value"] == 0.5
    assert "seed 1: 30 of 60 decisions valid" in pre[report.PLANNER_VALID]["detail"]
    pre = {r["name"]: r for r in report.planner_preconditions(_planner_frame([0, 1], {}), {0: flat, 1: falling}, _smoke_params(),
                                                               EvidenceParams())}
    assert pre[report.PLANNER_VALID]["passed"] and not pre[report.PLANNER_CONVERGED]["passed"]
    assert "seed 1" in pre[report.PLANNER_CONVERGED]["detail"]
