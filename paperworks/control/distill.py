"""Distil the teacher into a depth-limited regression tree — behaviour cloning on noisy
rollouts (the paper), plus two iterative fixes the paper did not implement. Every method
gets the same selection budget: it fits ``n`` candidate trees and keeps the one with the
best mean return on the pair's validation episodes (behaviour cloning: the full data plus
``n - 1`` bootstrap resamples; VIPER and DAgger: their ``n`` iterates), so a gain of VIPER or
DAgger is the method's, not a larger pick.

* VIPER (Bastani et al. 2018): resample states in proportion to the critic's Q-gap
  ℓ(s) = max_a Q(s,a) − min_a Q(s,a), roll out the current tree, label its states with
  the teacher, aggregate, refit; keep the iteration that does best on validation seeds.
* DAgger with β-mixing (Ross et al. 2011): the teacher acts with probability β_i
  (decaying), the tree otherwise; label visited states with the teacher, aggregate,
  refit; keep the best iteration on validation seeds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.tree import DecisionTreeRegressor

from paperworks.control.env import Episode, MixedPolicy, Policy, run_episode
from paperworks.control.measures import (boundedness, distinct_values, error_summary, quantization_error,
                                         steady_state_amplitude, switches_per_second)
from paperworks.control.policies import Actor, Critic, MAX_TORQUE
from paperworks.control.tree import TreePolicy, tree_features


@dataclass(frozen=True)
class Recipe:
    sigma: float
    kd: float | None          # None: no Pole Urgency feature
    depth: int
    method: str = "bc"        # "bc" | "viper" | "dagger"
    candidates: int = 1       # bc: trees fitted and picked from on validation episodes

    @property
    def key(self) -> str:
        kd = "none" if self.kd is None else f"{self.kd:g}"
        pick = f"|best-of-{self.candidates}" if self.method == "bc" and self.candidates > 1 else ""
        return f"{self.method}|sigma={self.sigma:g}|kd={kd}|depth={self.depth}{pick}"


@dataclass(frozen=True)
class IterConfig:
    iterations: int
    episodes_per_iteration: int
    validation_seeds: tuple[int, ...]
    env_id: str
    max_steps: int
    min_samples_leaf: int
    action_grid: int = 9
    beta0: float = 0.5
    beta_decay: float = 0.5


def fit_tree(states: np.ndarray, labels: np.ndarray, weights: np.ndarray | None, kd: float | None, depth: int,
             min_samples_leaf: int, seed: int) -> TreePolicy:
    reg = DecisionTreeRegressor(max_depth=depth, min_samples_leaf=min_samples_leaf, random_state=seed)
    reg.fit(tree_features(states, kd), labels, sample_weight=weights)
    return TreePolicy.from_sklearn(reg, kd)


def bootstrap_candidates(states, labels, weights, kd, depth: int, min_samples_leaf: int, n: int, seed: int
                         ) -> list[TreePolicy]:
    """Behaviour cloning's ``n`` candidates: the full data, then ``n - 1`` bootstrap resamples of its rows."""
    rng = np.random.default_rng([seed, 3])
    trees = [fit_tree(states, labels, weights, kd, depth, min_samples_leaf, seed)]
    for i in range(1, n):
        idx = rng.integers(len(states), size=len(states))
        trees.append(fit_tree(states[idx], labels[idx], weights[idx], kd, depth, min_samples_leaf, seed + i))
    return trees


def pick_best(trees: list[TreePolicy], cfg: "IterConfig") -> tuple[TreePolicy, list[dict]]:
    """The candidate with the best mean validation return (the first of equals)."""
    vals = [mean_return(t, cfg.env_id, cfg.validation_seeds, cfg.max_steps) for t in trees]
    best = int(np.argmax(vals))
    return trees[best], [{"candidate": i, "validation_return": v, "picked": i == best} for i, v in enumerate(vals)]


def run_episodes(policy: Policy, env_id: str, seeds, max_steps: int, **noise) -> list[Episode]:
    return [run_episode(policy, env_id, int(s), max_steps, **noise) for s in seeds]


def mean_return(policy: Policy, env_id: str, seeds, max_steps: int) -> float:
    return float(np.mean([e.ret for e in run_episodes(policy, env_id, seeds, max_steps)]))


def q_gap(critic: Critic, teacher: Actor, states: np.ndarray, n_grid: int, chunk: int = 4096) -> np.ndarray:
    """VIPER's loss weight ℓ(s) = max_a Q(s,a) − min_a Q(s,a) over a torque grid plus π_T(s)."""
    grid = np.linspace(-MAX_TORQUE, MAX_TORQUE, n_grid)
    out = np.empty(len(states))
    for i in range(0, len(states), chunk):
        s = states[i:i + chunk]
        acts = np.column_stack([np.tile(grid, (len(s), 1)), teacher.batch(s)])       # (n, G+1)
        q = critic.q(np.repeat(s, acts.shape[1], axis=0), acts.reshape(-1)).reshape(len(s), -1)
        out[i:i + chunk] = q.max(axis=1) - q.min(axis=1)
    return out


def viper(teacher: Actor, critic: Critic, states, labels, weights, kd, depth, cfg: IterConfig, seed: int
          ) -> tuple[TreePolicy, list[dict]]:
    rng = np.random.default_rng([seed, 1])
    S, Y, W = states, labels, weights
    G = q_gap(critic, teacher, S, cfg.action_grid)
    best, best_val, history = None, -np.inf, []
    for it in range(cfg.iterations + 1):
        p = W * (G + 1e-6)
        idx = rng.choice(len(S), size=len(S), p=p / p.sum())          # Q-gap-weighted resample
        tree = fit_tree(S[idx], Y[idx], None, kd, depth, cfg.min_samples_leaf, seed + it)
        val = mean_return(tree, cfg.env_id, cfg.validation_seeds, cfg.max_steps)
        history.append({"iteration": it, "rows": int(len(S)), "validation_return": val})
        if val > best_val:
            best, best_val = tree, val
        if it == cfg.iterations:
            break
        eps = run_episodes(tree, cfg.env_id, rng.integers(2**31 - 1, size=cfg.episodes_per_iteration), cfg.max_steps)
        new = np.concatenate([e.states for e in eps])
        S = np.concatenate([S, new])
        Y = np.concatenate([Y, teacher.batch(new)])
        W = np.concatenate([W, np.ones(len(new))])
        G = np.concatenate([G, q_gap(critic, teacher, new, cfg.action_grid)])
    return best, history


def dagger(teacher: Actor, start: TreePolicy, states, labels, weights, kd, depth, cfg: IterConfig, seed: int
           ) -> tuple[TreePolicy, list[dict]]:
    rng = np.random.default_rng([seed, 2])
    S, Y, W = states, labels, weights
    tree = start
    best = tree
    best_val = mean_return(tree, cfg.env_id, cfg.validation_seeds, cfg.max_steps)
    history = [{"iteration": 0, "rows": int(len(S)), "beta": None, "validation_return": best_val}]
    for it in range(1, cfg.iterations + 1):
        beta = cfg.beta0 * cfg.beta_decay ** (it - 1)
        eps = [run_episode(MixedPolicy(teacher, tree, beta, int(s)), cfg.env_id, int(s), cfg.max_steps)
               for s in rng.integers(2**31 - 1, size=cfg.episodes_per_iteration)]
        new = np.concatenate([e.states for e in eps])
        S = np.concatenate([S, new])
        Y = np.concatenate([Y, teacher.batch(new)])              # relabel with the clean teacher
        W = np.concatenate([W, np.ones(len(new))])
        tree = fit_tree(S, Y, W, kd, depth, cfg.min_samples_leaf, seed + it)
        val = mean_return(tree, cfg.env_id, cfg.validation_seeds, cfg.max_steps)
        history.append({"iteration": it, "rows": int(len(S)), "beta": beta, "validation_return": val})
        if val > best_val:
            best, best_val = tree, val
    return best, history


def behaviour(episodes: list[Episode], teacher: Actor | None, dt: float, deadband: float, steady_from: int,
              max_steps: int, quantization: bool = True) -> dict:
    """Returns, balance count and the control-quality measures of a set of episodes."""
    rets = np.array([e.ret for e in episodes])
    out = {
        "returns": rets.tolist(), "mean_return": float(rets.mean()), "min_return": float(rets.min()),
        "balanced": int(sum(e.balanced for e in episodes)), "episodes": len(episodes),
        "switches_per_s": float(np.mean([switches_per_second(e.applied_actions, dt) for e in episodes])),
        "switches_per_s_deadband": float(np.mean([switches_per_second(e.applied_actions, dt, deadband) for e in episodes])),
        "distinct_torques": distinct_values(np.concatenate([e.applied_actions for e in episodes])),
    }
    amps = [steady_state_amplitude(e.states[:, 1], steady_from) for e in episodes if e.length > steady_from + 1]
    out["theta_amplitude_ss"] = float(np.mean(amps)) if amps else float("nan")
    if quantization and teacher is not None:
        states = np.concatenate([e.states for e in episodes])
        acts = np.concatenate([e.clean_actions for e in episodes])
        out["quantization_error"] = error_summary(quantization_error(teacher.batch(states), acts))
    return out


def trace(ep: Episode) -> dict[str, list[float]]:
    return {"theta": ep.states[:, 1].tolist(), "action": ep.applied_actions.tolist()}


def short_behaviour(episodes: list[Episode]) -> dict:
    """Balance count and returns only (the hard held-out set)."""
    rets = np.array([e.ret for e in episodes])
    return {"balanced": int(sum(e.balanced for e in episodes)), "episodes": len(episodes),
            "mean_return": float(rets.mean()), "min_return": float(rets.min())}


def disturbed_response(policy: Policy, env_id: str, seeds, pulse_seeds, max_steps: int, dist) -> dict:
    """Closed loop under bounded torque pulses (``dist``: the eval.disturbance params) from the
    given starts, scored by :func:`boundedness`."""
    from paperworks.control.env import pulse_train

    eps = [run_episode(policy, env_id, int(s), max_steps,
                       disturbance=pulse_train(int(ps), max_steps, dist.pulse_amplitude, dist.pulse_steps, dist.pulse_every))
           for s, ps in zip(seeds, pulse_seeds)]
    return boundedness([e.states[:, 1] for e in eps], [e.states[:, 0] for e in eps], [e.balanced for e in eps],
                       dist.theta_bound, dist.x_bound)
