"""Typed section ``params.yaml:control`` — validated before any stage does work."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paperworks.core.params import StrictModel

# Only this env is supported: the features (Pole Urgency uses obs[1], obs[3]) and the
# success threshold (1000 steps) are specific to it.
EnvId = Literal["InvertedPendulum-v5"]


class EnvParams(StrictModel):
    id: EnvId = "InvertedPendulum-v5"
    max_steps: int = Field(1000, ge=10, le=1000, description="episode length; 1000 = solved")


class GridParams(StrictModel):
    teachers: list[int] = Field(..., min_length=1, description="teacher indices (each one TD3 seed)")
    draws: list[int] = Field(..., min_length=1, description="dataset draws per teacher")

    @model_validator(mode="after")
    def _unique(self) -> "GridParams":
        for name in ("teachers", "draws"):
            vals = getattr(self, name)
            if len(set(vals)) != len(vals) or min(vals) < 0:
                raise ValueError(f"{name} must be distinct non-negative integers, got {vals}")
        return self


class TeacherParams(StrictModel):
    total_timesteps: int = Field(..., ge=100, le=2_000_000)
    learning_starts: int = Field(..., ge=1)
    learning_rate: float = Field(..., gt=0, le=1e-1)
    net_arch: list[int] = Field(..., min_length=1, json_schema_extra={"repeats": True})  # layer sizes may repeat
    batch_size: int = Field(..., ge=1)
    buffer_size: int = Field(..., ge=1000, le=10_000_000)  # SB3 preallocates it
    exploration_noise: float = Field(..., ge=0, le=1, description="std of Gaussian action noise, fraction of max torque")
    eval_every: int = Field(..., ge=100, description="env steps between deterministic evaluations")
    eval_episodes: int = Field(..., ge=1)
    stop_after_solved_evals: int = Field(..., ge=0, description="stop once this many evaluations in a row return 1000 (0 = never)")

    @model_validator(mode="after")
    def _budget(self) -> "TeacherParams":
        if self.learning_starts >= self.total_timesteps:
            raise ValueError(f"learning_starts ({self.learning_starts}) must be < total_timesteps ({self.total_timesteps})")
        if any(n < 1 for n in self.net_arch):
            raise ValueError(f"net_arch sizes must be >= 1, got {self.net_arch}")
        return self


class RolloutParams(StrictModel):
    sigma: float = Field(..., ge=0, le=10, description="headline Gaussian action-noise std, torque units")
    sigma_sweep: list[float] = Field(..., min_length=1, description="noise levels collected (ablation); must include sigma")
    steps_per_sigma: int = Field(..., ge=100, le=10_000_000, description="rows collected per noise level")
    transient_steps: int = Field(..., ge=0, description="first steps of each episode that count as the initial transient")
    transient_weight: float = Field(..., ge=1, description="sample weight of transient rows")

    @model_validator(mode="after")
    def _headline_collected(self) -> "RolloutParams":
        if self.sigma not in self.sigma_sweep:
            raise ValueError(f"sigma={self.sigma} must be one of sigma_sweep {self.sigma_sweep}")
        if any(s < 0 for s in self.sigma_sweep):
            raise ValueError("sigma_sweep values must be >= 0")
        return self


class TreeParams(StrictModel):
    max_depth: int = Field(..., ge=1, le=20, description="depth of the headline tree")
    kd: float = Field(..., ge=0, le=10, description="Pole Urgency derivative gain: θ + kd·θ̇")
    pole_urgency: bool = Field(True, description="add the Pole Urgency feature to the headline recipe")
    min_samples_leaf: int = Field(..., ge=1)
    depth_sweep: list[int] = Field(..., min_length=1)
    kd_sweep: list[float] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _ranges(self) -> "TreeParams":
        if any(not 1 <= d <= 20 for d in self.depth_sweep):
            raise ValueError(f"depth_sweep values must be in 1..20, got {self.depth_sweep}")
        if any(k < 0 for k in self.kd_sweep):
            raise ValueError(f"kd_sweep values must be >= 0, got {self.kd_sweep}")
        return self


class ViperParams(StrictModel):
    iterations: int = Field(..., ge=1)
    episodes_per_iteration: int = Field(..., ge=1)
    action_grid: int = Field(..., ge=2, description="actions per state used for max/min Q")


class DaggerParams(StrictModel):
    iterations: int = Field(..., ge=1)
    episodes_per_iteration: int = Field(..., ge=1)
    beta0: float = Field(..., ge=0, le=1, description="probability of the teacher acting in iteration 1")
    beta_decay: float = Field(..., ge=0, le=1, description="β_i = beta0 · beta_decay^(i-1)")


class EvalParams(StrictModel):
    episodes: int = Field(..., ge=1, description="fixed held-out episodes per policy")
    validation_episodes: int = Field(..., ge=1, description="episodes VIPER/DAgger use to pick their best iteration")
    reset_noise_scale: float = Field(..., gt=0, le=1, description="harder initial-state noise for the robustness test (env default 0.01)")
    obs_noise: float = Field(..., ge=0, le=1, description="std of Gaussian observation noise for the robustness test")
    deadband: float = Field(..., ge=0, le=3, description="|action| below this counts as 0 in the dead-band chattering measure")
    steady_from: int = Field(..., ge=0, description="step from which θ amplitude counts as steady state")
    success_pairs: float = Field(0.9, gt=0, le=1, description="target share of pairs at n/n balanced")


class ClaimParams(StrictModel):
    """What the claims test (read by control_evaluate only)."""

    tree_vs_teacher_margin: float = Field(0.1, gt=0, le=0.5, description="non-inferiority margin in share of episodes balanced")


class Params(StrictModel):
    env: EnvParams
    grid: GridParams
    teacher: TeacherParams
    rollouts: RolloutParams
    tree: TreeParams
    viper: ViperParams
    dagger: DaggerParams
    eval: EvalParams
    claims: ClaimParams = ClaimParams()
