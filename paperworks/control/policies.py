"""The TD3 teacher as small numpy functions: actor and critic loaded from safetensors.

Numpy on one state is ~10x faster than torch per call, which is what the rollout and
evaluation loops need (hundreds of thousands of single-state predictions).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from paperworks.core.io import load_safetensors, save_safetensors

OBS_DIM = 4
ACT_DIM = 1
MAX_TORQUE = 3.0
OBS_NAMES = ("x", "theta", "x_dot", "theta_dot")


def mlp_shapes(prefix: str, sizes: list[int]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        shapes[f"{prefix}.{i}.weight"] = (fan_out, fan_in)
        shapes[f"{prefix}.{i}.bias"] = (fan_out,)
    return shapes


def actor_shapes(net_arch: list[int]) -> dict[str, tuple[int, ...]]:
    return mlp_shapes("actor", [OBS_DIM, *net_arch, ACT_DIM])


def critic_shapes(net_arch: list[int]) -> dict[str, tuple[int, ...]]:
    sizes = [OBS_DIM + ACT_DIM, *net_arch, 1]
    return {**mlp_shapes("q1", sizes), **mlp_shapes("q2", sizes)}


class NumpyMLP:
    """ReLU MLP; ``layers`` = [(W, b), ...] with W of shape (out, in)."""

    def __init__(self, layers: list[tuple[np.ndarray, np.ndarray]]):
        self.layers = [(np.ascontiguousarray(w.T, dtype=np.float32), b.astype(np.float32)) for w, b in layers]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.asarray(x, dtype=np.float32)
        for i, (w, b) in enumerate(self.layers):
            h = h @ w + b
            if i < len(self.layers) - 1:
                np.maximum(h, 0, out=h)
        return h


def _layers(tensors, prefix: str, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(tensors[f"{prefix}.{i}.weight"].numpy(), tensors[f"{prefix}.{i}.bias"].numpy()) for i in range(n)]


class Actor:
    """Deterministic TD3 actor: a = 3·tanh(MLP(s)) (tanh output scaled to the torque range)."""

    def __init__(self, mlp: NumpyMLP):
        self.mlp = mlp

    @classmethod
    def load(cls, path: Path | str, net_arch: list[int]) -> "Actor":
        tensors = load_safetensors(path, actor_shapes(net_arch))
        return cls(NumpyMLP(_layers(tensors, "actor", len(net_arch) + 1)))

    def batch(self, obs: np.ndarray) -> np.ndarray:
        return (MAX_TORQUE * np.tanh(self.mlp(np.atleast_2d(obs))))[:, 0].astype(np.float64)

    def __call__(self, obs: np.ndarray) -> float:
        return float(self.batch(obs)[0])


class Critic:
    """TD3's first critic Q1(s, a) (a in torque units; SB3 stores actions scaled to [-1, 1])."""

    def __init__(self, q1: NumpyMLP):
        self.q1 = q1

    @classmethod
    def load(cls, path: Path | str, net_arch: list[int]) -> "Critic":
        tensors = load_safetensors(path, critic_shapes(net_arch))
        return cls(NumpyMLP(_layers(tensors, "q1", len(net_arch) + 1)))

    def q(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(obs)
        a = np.asarray(actions, dtype=np.float64).reshape(len(obs), 1) / MAX_TORQUE
        return self.q1(np.column_stack([obs, a]))[:, 0].astype(np.float64)


def export_sb3(model, actor_path: Path, critic_path: Path, metadata: dict[str, str]) -> None:
    """Write an SB3 TD3 model's actor and twin critics as safetensors under our names."""
    actor = {}
    linears = [m for m in model.actor.mu if hasattr(m, "weight")]
    for i, lin in enumerate(linears):
        actor[f"actor.{i}.weight"] = lin.weight
        actor[f"actor.{i}.bias"] = lin.bias
    critic = {}
    for name, net in (("q1", model.critic.qf0), ("q2", model.critic.qf1)):
        for i, lin in enumerate(m for m in net if hasattr(m, "weight")):
            critic[f"{name}.{i}.weight"] = lin.weight
            critic[f"{name}.{i}.bias"] = lin.bias
    save_safetensors(actor_path, actor, metadata)
    save_safetensors(critic_path, critic, metadata)
