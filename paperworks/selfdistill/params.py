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
    n_test_per_family: int = Field(200, ge=4, le=100_000, description="held-out test prompts per family (final evaluation)")
    n_val_per_family: int = Field(64, ge=4, le=100_000, description="held-out validation prompts per family (curves, GRPO tuning)")


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


MethodName = Literal["reverse_kl", "forward_kl", "sr_opsd", "frozen_teacher"]


class OPSDParams(StrictModel):
    """The one on-policy budget and schedule of every method (the distillation variants and GRPO):
    same steps, same warm-up + cosine schedule, same evaluation steps, same seeds."""

    steps: int = Field(600, ge=1, description="long budget: update steps of every method")
    prompts_per_step: int = Field(32, ge=1, description="on-policy samples per update step (GRPO: groups × group_size)")
    lr: float = Field(1e-3, gt=0, description="peak learning rate of the distillation methods (GRPO's is tuned: grpo.lrs)")
    warmup_steps: int = Field(10, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    ema_beta: float = Field(0.99, ge=0.0, lt=1.0, description="EMA self-teacher: θ_T ← β θ_T + (1−β) θ_S")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the student's on-policy samples")
    max_new_tokens: int = Field(40, ge=1)
    eval_every: int = Field(25, ge=1, description="validation probe every this many steps (and at the last step)")
    n_eval_per_family: int = Field(64, ge=1, description="validation prompts per family for the curves")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1,
                             description="paired seeds: one DVC stage per (method, seed)")
    run: list[MethodName] = Field(default_factory=lambda: ["reverse_kl", "sr_opsd"], min_length=1,
                                  description="distillation methods run as stages (each must be configured in methods)")


class GRPOParams(StrictModel):
    group_size: int = Field(4, ge=2)
    clip_eps: float = Field(0.2, gt=0)
    kl_coef: float = Field(0.02, ge=0, description="k3 KL to the frozen reference")
    adv_eps: float = Field(1e-4, gt=0)
    lrs: list[float] = Field(default_factory=lambda: [1e-4, 3e-4, 1e-3], min_length=1,
                             description="peak learning rates tried on validation at the full budget (one tuning run each)")
    tune_seed: int = Field(1000, ge=0, description="seed of the tuning runs (not one of opsd.seeds: no selection on the claim seeds)")

    @model_validator(mode="after")
    def _positive_lrs(self):
        bad = [lr for lr in self.lrs if not lr > 0]
        if bad:
            raise ValueError(f"lrs must be > 0, got {bad}")
        return self


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
    min_seeds: int = Field(5, ge=2, description="paired seeds a claim needs")
    accuracy_margin: float = Field(0.05, gt=0, le=0.5, description="non-inferiority margin for 'matches or beats' on final accuracy")


class Params(StrictModel):
    data: DataParams = DataParams()
    model: LMConfig = LMConfig(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_positions=128)
    base: BaseParams = BaseParams()
    opsd: OPSDParams = OPSDParams()
    methods: dict[MethodName, MethodSpec]
    grpo: GRPOParams = GRPOParams()
    sweep: SweepParams = SweepParams()
    eval: EvalParams = EvalParams()
    claims: ClaimParams = ClaimParams()

    @model_validator(mode="after")
    def _run_methods_configured(self):
        missing = [m for m in self.opsd.run if m not in self.methods]
        if missing:
            raise ValueError(f"opsd.run names methods not configured in methods: {missing}")
        if self.opsd.prompts_per_step % self.grpo.group_size:
            raise ValueError(f"grpo.group_size {self.grpo.group_size} must divide opsd.prompts_per_step {self.opsd.prompts_per_step}")
        if self.grpo.tune_seed in self.opsd.seeds:
            raise ValueError(f"grpo.tune_seed {self.grpo.tune_seed} must not be one of opsd.seeds (tuning would select on a claim seed)")
        return self
