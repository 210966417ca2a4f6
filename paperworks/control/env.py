"""Episodes on InvertedPendulum-v5 for any policy ``obs -> torque``.

The raw MuJoCo env (``.unwrapped``) is stepped directly with our own step limit: it
avoids the per-step wrapper checks, and the limit is the task's 1000-step success test.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from paperworks.control.policies import MAX_TORQUE
from paperworks.core.io import LOGS

Policy = Callable[[np.ndarray], float]


@lru_cache(maxsize=1)
def route_mujoco_log() -> Path:
    """Send MuJoCo's own log to ``logs/mujoco.log`` (ignored by git and DVC).

    MuJoCo appends its warnings (an unstable simulation, a bad state) to MUJOCO_LOG.TXT in
    the current directory, which for a stage is the work tree. Called before any env is made.
    """
    import mujoco

    path = (LOGS / "mujoco.log").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg = mujoco.MjLogConfig.get()
    cfg.logfile = str(path)
    cfg.set()
    return path


@lru_cache(maxsize=8)
def make_env(env_id: str, reset_noise_scale: float | None = None):
    import gymnasium as gym

    route_mujoco_log()
    try:
        kwargs = {} if reset_noise_scale is None else {"reset_noise_scale": reset_noise_scale}
        return gym.make(env_id, **kwargs).unwrapped
    except gym.error.Error as e:  # params validation normally catches this first
        raise ValueError(f"cannot make env '{env_id}': {e}") from None


def control_dt(env_id: str) -> float:
    return float(make_env(env_id).dt)


@dataclass
class Episode:
    seed: int
    states: np.ndarray          # (T, 4) true states the action was chosen in
    clean_actions: np.ndarray   # (T,) what the acting policy output before action noise
    applied_actions: np.ndarray  # (T,) torque actually applied (noise added, clipped)
    ret: float
    balanced: bool

    @property
    def length(self) -> int:
        return len(self.states)


def run_episode(
    policy: Policy,
    env_id: str,
    seed: int,
    max_steps: int,
    action_sigma: float = 0.0,
    obs_noise: float = 0.0,
    reset_noise_scale: float | None = None,
    disturbance: np.ndarray | None = None,
) -> Episode:
    """One episode; every random choice (reset, action/obs noise) comes from ``seed``.

    ``disturbance`` (one torque per step) is added to the policy's output before the clip to
    the actuator range: a bounded input the controller did not choose.
    """
    if disturbance is not None and len(disturbance) < max_steps:
        raise ValueError(f"disturbance has {len(disturbance)} steps, the episode up to {max_steps}")
    env = make_env(env_id, reset_noise_scale)
    rng = np.random.default_rng([seed, 7])  # noise stream independent of the env's reset stream
    obs, _ = env.reset(seed=seed)
    states, clean, applied = [], [], []
    ret, terminated = 0.0, False
    act = np.zeros(1)
    for step in range(max_steps):
        seen = obs + obs_noise * rng.standard_normal(obs.shape) if obs_noise > 0 else obs
        a = float(policy(seen))
        u = float(np.clip(a + action_sigma * rng.standard_normal(), -MAX_TORQUE, MAX_TORQUE)) if action_sigma > 0 else a
        if disturbance is not None:
            u = float(np.clip(u + disturbance[step], -MAX_TORQUE, MAX_TORQUE))
        states.append(obs.copy())
        clean.append(a)
        applied.append(u)
        act[0] = u
        obs, r, terminated, _, _ = env.step(act)
        ret += float(r)
        if terminated:
            break
    return Episode(seed, np.asarray(states).reshape(-1, 4), np.asarray(clean), np.asarray(applied), ret,
                   balanced=not terminated and len(states) == max_steps)


def pulse_train(seed: int, steps: int, amplitude: float, width: int, every: int) -> np.ndarray:
    """Torque pulses of ±``amplitude`` (random sign), ``width`` steps long, one every ``every`` steps
    from a random phase: a bounded disturbance, the same for every policy scored on ``seed``."""
    rng = np.random.default_rng([seed, 13])
    d = np.zeros(steps)
    for start in range(int(rng.integers(every)), steps, every):
        d[start:start + width] = amplitude * rng.choice([-1.0, 1.0])
    return d


class MixedPolicy:
    """DAgger's β-mixture: the teacher acts with probability β, the student otherwise."""

    def __init__(self, teacher: Policy, student: Policy, beta: float, seed: int):
        self.teacher, self.student, self.beta = teacher, student, beta
        self.rng = np.random.default_rng([seed, 11])

    def __call__(self, obs: np.ndarray) -> float:
        return self.teacher(obs) if self.rng.random() < self.beta else self.student(obs)
