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
    total_timesteps: int = Field(..., ge=100, le=2_000_000, description="cap of env steps per training attempt")
    learning_starts: int = Field(..., ge=1)
    learning_rate: float = Field(..., gt=0, le=1e-1)
    net_arch: list[int] = Field(..., min_length=1, json_schema_extra={"repeats": True})  # layer sizes may repeat
    batch_size: int = Field(..., ge=1)
    buffer_size: int = Field(..., ge=1000, le=10_000_000)  # SB3 preallocates it
    exploration_noise: float = Field(..., ge=0, le=1, description="std of Gaussian action noise, fraction of max torque")
    eval_every: int = Field(..., ge=100, description="env steps between deterministic validation evaluations")
    validation_episodes: int = Field(..., ge=1, description="teacher-validation episodes per evaluation (own seeds)")
    validation_wide_episodes: int = Field(..., ge=0, description="how many of them start at validation_wide_reset_noise")
    validation_wide_reset_noise: float = Field(..., gt=0, le=1, description="reset_noise_scale of the wide-start validation episodes (env default 0.01)")
    stop_after_passes: int = Field(..., ge=1, description="stop once this many evaluations in a row balance every validation episode")
    reserve_attempts: int = Field(..., ge=0, le=10, description="reserve seeds a slot trains, one after another, when an attempt ends at the cap without a pass")

    @model_validator(mode="after")
    def _budget(self) -> "TeacherParams":
        if self.learning_starts >= self.total_timesteps:
            raise ValueError(f"learning_starts ({self.learning_starts}) must be < total_timesteps ({self.total_timesteps})")
        if self.eval_every > self.total_timesteps:
            raise ValueError(f"eval_every ({self.eval_every}) must be <= total_timesteps ({self.total_timesteps})")
        if self.validation_wide_episodes > self.validation_episodes:
            raise ValueError(f"validation_wide_episodes ({self.validation_wide_episodes}) must be <= "
                             f"validation_episodes ({self.validation_episodes})")
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
    selection_candidates: int = Field(..., ge=1, le=50, description=(
        "trees every claimed recipe fits and picks from on the validation episodes (bootstrap resamples; "
        "candidate 0 is the full data); VIPER and DAgger get the same budget: iterations + 1 candidates"))
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


class DisturbanceParams(StrictModel):
    """Bounded input for the boundedness test: torque pulses added to the controller's output."""

    pulse_amplitude: float = Field(..., ge=0, le=3, description="|pulse| in torque units (sign random per pulse)")
    pulse_steps: int = Field(..., ge=1, description="steps each pulse lasts")
    pulse_every: int = Field(..., ge=2, description="steps from one pulse's start to the next")
    theta_bound: float = Field(..., gt=0, le=0.2, description="|θ| bound (rad); the env ends an episode at 0.2")
    x_bound: float = Field(..., gt=0, le=1, description="|x| bound of the cart (the rail ends at ±1)")

    @model_validator(mode="after")
    def _pulses_fit(self) -> "DisturbanceParams":
        if self.pulse_steps >= self.pulse_every:
            raise ValueError(f"pulse_steps ({self.pulse_steps}) must be < pulse_every ({self.pulse_every})")
        return self


class EvalParams(StrictModel):
    episodes: int = Field(..., ge=1, description="fixed held-out episodes per policy (nominal starts, and the hard set)")
    validation_episodes: int = Field(..., ge=1, description="episodes every recipe uses to pick among its candidates")
    reset_noise_scale: float = Field(..., gt=0, le=1, description="hard held-out set: initial-state noise (env default 0.01)")
    obs_noise: float = Field(..., ge=0, le=1, description="hard held-out set: std of Gaussian observation noise")
    deadband: float = Field(..., ge=0, le=3, description="|action| below this counts as 0 in the dead-band chattering measure")
    steady_from: int = Field(..., ge=0, description="step from which θ amplitude counts as steady state")
    trace_window_s: float = Field(2.5, gt=0, le=40, description="length of the torque/θ trace plot, from steady_from on")
    disturbance: DisturbanceParams
    success_pairs: float = Field(0.9, gt=0, le=1, description="target share of pairs at n/n balanced (report only)")


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

    @model_validator(mode="after")
    def _same_selection_budget(self) -> "Params":
        # a gain of VIPER/DAgger over the headline recipe must be the method's, not a larger pick
        n = self.tree.selection_candidates
        for name in ("viper", "dagger"):
            it = getattr(self, name).iterations
            if it + 1 != n:
                raise ValueError(f"{name}.iterations + 1 ({it + 1}) must equal tree.selection_candidates ({n}): "
                                 "every method picks from the same number of trees on the validation episodes")
        if self.eval.steady_from >= self.env.max_steps:
            raise ValueError(f"eval.steady_from ({self.eval.steady_from}) must be < env.max_steps ({self.env.max_steps})")
        return self
