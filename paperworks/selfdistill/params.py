"""Typed ``params.yaml:selfdistill`` section. Wrong values fail before any work."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from paperworks.core.lm import LMConfig
from paperworks.core.params import StrictModel

METHODS = ("reverse_kl", "forward_kl", "sr_opsd", "frozen_teacher")


class DataParams(StrictModel):
    add_digits: int = Field(3, ge=1, le=6, description="digits per operand of the addition family")
    sum_terms: int = Field(4, ge=2, le=6, description="terms of the multi-solution sum family")
    prog_ops: int = Field(3, ge=1, le=6, description="statements of the tiny-program family")
    n_sft: int = Field(3000, ge=10, le=1_000_000, description="worked solutions for the base SFT (the 'small share')")
    sft_privileged_share: float = Field(0.5, ge=0.0, le=1.0, description="share of SFT examples in the privileged format")
    n_train_prompts: int = Field(3000, ge=10, le=1_000_000, description="prompt pool for on-policy training")
    n_test_per_family: int = Field(200, ge=4, le=100_000, description="held-out test prompts per family")


class BaseParams(StrictModel):
    steps: int = Field(800, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    grad_clip: float = Field(1.0, gt=0)


class MethodSpec(StrictModel):
    """One self-distillation variant. D_ρ(student ‖ target) is ``direction: reverse``."""

    alpha: float = Field(1.0, ge=0.0, le=1.0, description="target ∝ p_teacher^α · p_ref^(1−α)")
    rho: float = Field(1.0, gt=0.0, description="Rényi order; 1 = KL")
    direction: Literal["reverse", "forward"] = "reverse"
    teacher: Literal["ema", "frozen"] = "ema"
    steps: int | None = Field(None, ge=1, description="update steps; null = opsd.steps (the long budget)")


class OPSDParams(StrictModel):
    """Shared on-policy budget of every distillation method (and GRPO)."""

    steps: int = Field(300, ge=1, description="long budget: update steps")
    prompts_per_step: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(10, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    ema_beta: float = Field(0.99, ge=0.0, lt=1.0, description="EMA self-teacher: θ_T ← β θ_T + (1−β) θ_S")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the student's on-policy samples")
    max_new_tokens: int = Field(40, ge=1)
    eval_every: int = Field(25, ge=1)
    n_eval_per_family: int = Field(64, ge=1, description="held-out prompts per family for the curves")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1)


class GRPOParams(StrictModel):
    group_size: int = Field(4, ge=2)
    clip_eps: float = Field(0.2, gt=0)
    kl_coef: float = Field(0.02, ge=0, description="k3 KL to the frozen reference")
    adv_eps: float = Field(1e-4, gt=0)
    steps: int | None = Field(None, ge=1, description="update steps; null = opsd.steps")


class SweepParams(StrictModel):
    alphas: list[float] = Field(default_factory=lambda: [0.25, 0.5, 0.75, 1.0], min_length=1)
    rhos: list[float] = Field(default_factory=lambda: [0.5, 0.75, 1.0], min_length=1)
    steps: int = Field(100, ge=1, description="short budget of each sweep run")
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)

    @model_validator(mode="after")
    def _ranges(self):
        bad_a = [a for a in self.alphas if not 0.0 <= a <= 1.0]
        bad_r = [r for r in self.rhos if r <= 0.0]
        if bad_a:
            raise ValueError(f"alphas must lie in [0, 1], got {bad_a}")
        if bad_r:
            raise ValueError(f"rhos must be > 0, got {bad_r}")
        return self


class EvalParams(StrictModel):
    pass_k: int = Field(4, ge=1)
    temperature: float = Field(0.8, gt=0)


class ClaimParams(StrictModel):
    """What the claims test (read by selfdistill_evaluate only)."""

    min_long_steps: int = Field(600, ge=1, description="update steps where reverse-KL collapse was seen: the long budget must reach it")
    accuracy_margin: float = Field(0.05, gt=0, le=0.5, description="non-inferiority margin for 'matches or beats' on final accuracy")


class Params(StrictModel):
    data: DataParams = DataParams()
    model: LMConfig = LMConfig(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_positions=128)
    base: BaseParams = BaseParams()
    opsd: OPSDParams = OPSDParams()
    methods: dict[Literal["reverse_kl", "forward_kl", "sr_opsd", "frozen_teacher"], MethodSpec]
    grpo: GRPOParams = GRPOParams()
    sweep: SweepParams = SweepParams()
    eval: EvalParams = EvalParams()
    claims: ClaimParams = ClaimParams()
