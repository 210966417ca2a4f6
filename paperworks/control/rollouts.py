"""Noisy Oracle Rollouts (paper §III-C): run the teacher with Gaussian action noise so
the pendulum visits near-failure states, and label every visited state with the
teacher's *clean* action. Rows from each episode's initial transient get a larger
sample weight."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.control.env import Policy, run_episode

SCHEMA = pa.schema([
    ("sigma", pa.float64()), ("episode", pa.int32()), ("t", pa.int32()),
    ("x", pa.float64()), ("theta", pa.float64()), ("x_dot", pa.float64()), ("theta_dot", pa.float64()),
    ("applied_action", pa.float64()), ("teacher_action", pa.float64()), ("weight", pa.float64()),
])
STATE_COLS = ["x", "theta", "x_dot", "theta_dot"]


def collect(teacher: Policy, env_id: str, sigmas: list[float], steps_per_sigma: int, max_steps: int,
            transient_steps: int, transient_weight: float, seed: int) -> pd.DataFrame:
    """``steps_per_sigma`` rows per noise level (episodes run until the budget is met, the
    last one cut), so every level trains on the same amount of data."""
    frames = []
    for j, sigma in enumerate(sigmas):
        episode_rng = np.random.default_rng([seed, j])
        rows, episode = 0, 0
        while rows < steps_per_sigma:
            ep = run_episode(teacher, env_id, int(episode_rng.integers(2**31 - 1)), max_steps, action_sigma=sigma)
            n = min(ep.length, steps_per_sigma - rows)
            t = np.arange(n, dtype=np.int32)
            frames.append(pd.DataFrame({
                "sigma": np.full(n, float(sigma)), "episode": np.full(n, episode, dtype=np.int32), "t": t,
                **{c: ep.states[:n, i] for i, c in enumerate(STATE_COLS)},
                "applied_action": ep.applied_actions[:n], "teacher_action": ep.clean_actions[:n],
                "weight": np.where(t < transient_steps, transient_weight, 1.0),
            }))
            rows += n
            episode += 1
    return pd.concat(frames, ignore_index=True)[SCHEMA.names]


def arrays(df: pd.DataFrame, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """States, clean teacher labels and weights of one noise level."""
    part = df[np.isclose(df["sigma"].to_numpy(), sigma)]
    if part.empty:
        raise KeyError(f"no rows with sigma={sigma}; dataset has {sorted(df['sigma'].unique())}")
    return part[STATE_COLS].to_numpy(), part["teacher_action"].to_numpy(), part["weight"].to_numpy()
