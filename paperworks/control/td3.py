"""TD3 teacher: Stable-Baselines3's TD3 configured as the paper / TD3 paper / CleanRL.

Twin critics, clipped target-policy noise (0.2, clip 0.5), delayed actor updates
(every 2 critic steps), actor 2×256 ReLU with tanh scaled to ±3, lr 3e-4. SB3's own
defaults differ (lr 1e-3, [400, 300]); we set them explicitly. A callback evaluates
the deterministic policy every ``eval_every`` env steps on fixed evaluation seeds,
logs the curve (dvclive) and stops once the policy has returned 1000 for
``stop_after_solved_evals`` evaluations in a row.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from paperworks.control.env import route_mujoco_log, run_episode

SOLVED_RETURN = 1000.0


@dataclass(frozen=True)
class TD3Config:
    env_id: str = "InvertedPendulum-v5"
    total_timesteps: int = 40_000
    learning_starts: int = 1_000
    learning_rate: float = 3e-4
    net_arch: tuple[int, ...] = (256, 256)
    batch_size: int = 256
    buffer_size: int = 1_000_000
    exploration_noise: float = 0.1   # × max torque
    gamma: float = 0.99
    tau: float = 0.005
    policy_delay: int = 2
    target_policy_noise: float = 0.2
    target_noise_clip: float = 0.5
    eval_every: int = 1_000
    eval_episodes: int = 3
    stop_after_solved_evals: int = 3
    max_steps: int = 1000
    sb3_defaults: bool = False   # True: SB3's own defaults (for the benchmark), ignoring lr/net/starts/batch


@dataclass
class TrainResult:
    model: object
    curve: list[dict] = field(default_factory=list)   # {"step", "eval_return", "eval_min"}
    steps_to_solved: int | None = None                 # env steps at the first evaluation returning 1000
    env_steps: int = 0
    wall_s: float = 0.0


def build_model(cfg: TD3Config, seed: int):
    import gymnasium as gym
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    route_mujoco_log()
    env = gym.make(cfg.env_id)
    noise = NormalActionNoise(np.zeros(1), cfg.exploration_noise * np.ones(1))  # SB3 adds it in [-1, 1] units
    if cfg.sb3_defaults:  # SB3's defaults have no exploration noise; we keep the same noise for both
        return TD3("MlpPolicy", env, action_noise=noise, seed=seed, device="cpu", verbose=0)
    return TD3(
        "MlpPolicy", env, learning_rate=cfg.learning_rate, buffer_size=cfg.buffer_size,
        learning_starts=cfg.learning_starts, batch_size=cfg.batch_size, tau=cfg.tau, gamma=cfg.gamma,
        train_freq=1, gradient_steps=1, action_noise=noise, policy_delay=cfg.policy_delay,
        target_policy_noise=cfg.target_policy_noise, target_noise_clip=cfg.target_noise_clip,
        policy_kwargs={"net_arch": list(cfg.net_arch)}, seed=seed, device="cpu", verbose=0,
    )


def deterministic_policy(model) -> Callable[[np.ndarray], float]:
    import torch

    def act(obs: np.ndarray) -> float:
        with torch.no_grad():
            a = model.actor(torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1))
        return float(model.policy.unscale_action(a.numpy())[0, 0])

    return act


def train_td3(cfg: TD3Config, seed: int, eval_seeds: list[int], log: Callable[[dict], None] | None = None,
              progress: bool = True) -> TrainResult:
    """Train; ``log`` receives each evaluation point (the stage sends it to dvclive)."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tqdm import tqdm

    model = build_model(cfg, seed)
    result = TrainResult(model=model)
    bar = tqdm(total=cfg.total_timesteps, desc=f"TD3 seed {seed}", unit="step", disable=not progress, mininterval=2)

    class EvalStop(BaseCallback):
        def __init__(self):
            super().__init__()
            self.solved_in_row = 0

        def _on_step(self) -> bool:
            bar.update(1)
            step = self.num_timesteps
            if step % cfg.eval_every:
                return True
            act = deterministic_policy(model)
            rets = [run_episode(act, cfg.env_id, s, cfg.max_steps).ret for s in eval_seeds[: cfg.eval_episodes]]
            point = {"step": step, "eval_return": float(np.mean(rets)), "eval_min": float(np.min(rets))}
            result.curve.append(point)
            if log:
                log(point)
            solved = point["eval_min"] >= SOLVED_RETURN * cfg.max_steps / 1000
            if solved and result.steps_to_solved is None:
                result.steps_to_solved = step
            self.solved_in_row = self.solved_in_row + 1 if solved else 0
            bar.set_postfix(ret=f"{point['eval_return']:.0f}")
            return not (cfg.stop_after_solved_evals and self.solved_in_row >= cfg.stop_after_solved_evals)

    t0 = time.perf_counter()
    model.learn(total_timesteps=cfg.total_timesteps, callback=EvalStop())
    bar.close()
    result.wall_s = time.perf_counter() - t0
    result.env_steps = int(model.num_timesteps)
    return result
