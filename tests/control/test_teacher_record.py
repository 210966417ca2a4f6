"""Teacher training record, seed streams, the candidate pick and the boundedness measures."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml
from sklearn.tree import DecisionTreeRegressor

from paperworks.control.distill import IterConfig, bootstrap_candidates, mean_return, pick_best
from paperworks.control.env import pulse_train, run_episode
from paperworks.control.layout import (distill_validation_seeds, disturbance_seeds, heldout_seeds, robust_seeds,
                                       teacher_dir, teacher_seed, teacher_validation_episodes)
from paperworks.control.measures import boundedness
from paperworks.control.params import Params
from paperworks.core.params import validate_section
from paperworks.core.profile import compose
from paperworks.core.seeding import derive_seed
from tests.conftest import REPO


def test_teacher_stage_trains_reserves_records_them_and_keeps_the_best_evaluation(tmp_path):
    """A budget far too small to balance: every attempt hits the cap, so the slot trains its declared
    reserve seed too; the record names both seeds as failed, and the kept step is the evaluation with
    the best minimum return (the later one of equals), not the last."""
    params = compose("smoke", REPO / "conf")
    params["control"]["teacher"].update(total_timesteps=300, learning_starts=100, eval_every=100, batch_size=32,
                                        net_arch=[16, 16], buffer_size=1000, validation_episodes=2,
                                        validation_wide_episodes=1, reserve_attempts=1)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = dict(os.environ, PYTHONPATH=str(REPO), PAPERWORKS_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "stages.control.teacher", "--teacher", "0"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((tmp_path / teacher_dir(0) / "train.json").read_text())
    g = params["seed"]
    seeds = [teacher_seed(g, 0, 0), teacher_seed(g, 0, 1)]
    assert [a["seed"] for a in rec["attempts"]] == seeds and len(set(seeds)) == 2
    assert rec["solved"] is False and rec["failed_seeds"] == seeds and rec["replaced_seeds"] == []
    assert rec["env_steps"] == 600 and all(a["env_steps"] == 300 for a in rec["attempts"])
    kept = rec["attempts"][rec["attempt"]]
    assert rec["seed"] == kept["seed"]
    best = max(kept["curve"], key=lambda pt: (pt["eval_min"], pt["step"]))
    assert rec["kept_step"] == best["step"] and rec["kept_min_return"] == best["eval_min"]
    # the kept attempt is the one with the best minimum return over the slot's attempts
    assert kept["kept_min_return"] == max(a["kept_min_return"] for a in rec["attempts"])
    assert [v["reset_noise_scale"] for v in rec["validation"]] == [None, params["control"]["teacher"]["validation_wide_reset_noise"]]
    assert (tmp_path / teacher_dir(0) / "actor.safetensors").stat().st_size > 0


def test_seed_streams_are_disjoint_in_the_default_profile():
    p = validate_section("control", Params, compose("default", REPO / "conf")["control"])
    g = compose("default", REPO / "conf")["seed"]
    streams = {
        "teacher validation": [s for s, _ in teacher_validation_episodes(g, p.teacher)],
        "held-out": heldout_seeds(g, p.eval.episodes),
        "hard held-out": robust_seeds(g, p.eval.episodes),
        "distill validation": [s for t in p.grid.teachers for d in p.grid.draws
                               for s in distill_validation_seeds(g, t, d, p.eval.validation_episodes)],
        # the first episodes the rollout stage draws for every pair and noise level
        "rollouts": [int(np.random.default_rng([derive_seed(g, "control", "rollouts", t, d), j]).integers(2**31 - 1))
                     for t in p.grid.teachers for d in p.grid.draws for j in range(len(p.rollouts.sigma_sweep))],
    }
    seen: dict[int, str] = {}
    for name, seeds in streams.items():
        for s in seeds:
            assert seen.setdefault(s, name) == name, f"seed {s} is in both {seen[s]} and {name}"
    wide = [n for _, n in teacher_validation_episodes(g, p.teacher) if n is not None]
    assert len(wide) == p.teacher.validation_wide_episodes and all(n > 0.01 for n in wide)
    assert len(set(disturbance_seeds(g, p.eval.episodes))) == p.eval.episodes


def test_pulse_train_is_bounded_periodic_and_seeded():
    d = pulse_train(5, 1000, amplitude=1.5, width=4, every=100)
    assert np.abs(d).max() == 1.5 and set(np.unique(np.abs(d))) == {0.0, 1.5}
    assert (d != 0).sum() == 10 * 4                      # ten pulses of four steps
    starts = np.flatnonzero((d != 0) & (np.roll(d, 1) == 0))
    assert np.all(np.diff(starts) == 100)
    assert np.array_equal(d, pulse_train(5, 1000, 1.5, 4, 100)) and not np.array_equal(d, pulse_train(6, 1000, 1.5, 4, 100))


def test_disturbance_reaches_the_actuator_clipped():
    zero = lambda obs: 0.0  # noqa: E731
    d = pulse_train(1, 50, amplitude=5.0, width=3, every=20)
    ep = run_episode(zero, "InvertedPendulum-v5", 3, 50, disturbance=d)
    n = ep.length
    np.testing.assert_array_equal(ep.applied_actions, np.clip(d[:n], -3, 3))
    np.testing.assert_array_equal(ep.clean_actions, np.zeros(n))
    with pytest.raises(ValueError, match="disturbance"):
        run_episode(zero, "InvertedPendulum-v5", 3, 50, disturbance=d[:10])


def test_boundedness_counts_completed_episodes_inside_both_bounds():
    thetas = [np.array([0.0, 0.05, -0.1]), np.array([0.0, 0.15]), np.array([0.01, -0.02])]
    xs = [np.array([0.0, 0.3]), np.array([0.0, 0.1]), np.array([0.0, -0.95])]
    b = boundedness(thetas, xs, [True, True, False], theta_bound=0.12, x_bound=0.9)
    assert b["within_each"] == [True, False, False]     # 2nd: |θ| 0.15 > 0.12; 3rd: stopped early (and |x| 0.95)
    assert b["within"] == 1 and b["episodes"] == 3 and b["stopped"] == 1
    assert b["worst_theta"] == 0.15 and b["worst_x"] == 0.3      # over the episodes that ran to the end
    assert boundedness(thetas[2:], xs[2:], [False], 0.12, 0.9)["worst_theta"] is None
    with pytest.raises(ValueError):
        boundedness(thetas, xs[:2], [True, True], 0.1, 0.9)


def test_candidates_are_reproducible_and_the_pick_is_the_best_on_validation():
    rng = np.random.default_rng(0)
    S = rng.normal(scale=[0.1, 0.05, 0.2, 0.3], size=(2000, 4))
    Y = np.clip(-20 * S[:, 1] - 3 * S[:, 3], -3, 3)
    W = np.ones(len(S))
    a = bootstrap_candidates(S, Y, W, 0.1, 4, 5, 3, seed=7)
    b = bootstrap_candidates(S, Y, W, 0.1, 4, 5, 3, seed=7)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    full = DecisionTreeRegressor(max_depth=4, min_samples_leaf=5, random_state=7).fit(
        np.column_stack([S, S[:, 1] + 0.1 * S[:, 3]]), Y)
    np.testing.assert_array_equal(a[0].threshold, full.tree_.threshold)     # candidate 0: the full data
    assert a[1].to_dict() != a[0].to_dict()                                 # the others: resamples
    flipped = bootstrap_candidates(S, -Y, W, 0.1, 4, 5, 1, seed=7)[0]       # the opposite controller
    cfg = IterConfig(iterations=0, episodes_per_iteration=0, validation_seeds=(11, 12), env_id="InvertedPendulum-v5",
                     max_steps=200, min_samples_leaf=5)
    returns = [mean_return(t, cfg.env_id, cfg.validation_seeds, cfg.max_steps) for t in (flipped, a[0])]
    assert returns[0] != returns[1]
    for order in ([flipped, a[0]], [a[0], flipped]):
        best, record = pick_best(order, cfg)
        want = int(np.argmax([mean_return(t, cfg.env_id, cfg.validation_seeds, cfg.max_steps) for t in order]))
        assert best is order[want] and [r["picked"] for r in record] == [i == want for i in range(2)]
