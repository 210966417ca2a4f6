"""Typed section ``params.yaml:hybrid_lm``: corpus, base model, variants (overrides of the base
model), the training grid, decoding bench and claim settings. Every variant's full
:class:`HybridLMConfig` is built at validation time, so a bad variant (e.g. ``kda.chunk_size ×
|kda.lower_bound| > 80``, which overflows the chunkwise kernel) fails before any stage runs."""
from __future__ import annotations

import copy
from typing import Any

from pydantic import Field, field_validator, model_validator

from paperworks.core.lm.hybrid import HybridLMConfig
from paperworks.core.params import StrictModel


class CorpusParams(StrictModel):
    context: int = Field(128, ge=16, description="training context T (tokens per sequence)")
    n_train: int = Field(4096, ge=8, description="training sequences")
    n_heldout: int = Field(512, ge=4, description="held-out sequences (1× context, task mixture) for held-out loss")
    n_eval: int = Field(48, ge=2, description="evaluation sequences per (task, context) and per MQAR pair count")
    eval_multiples: list[int] = Field([1, 2, 4, 8], min_length=1, description="evaluation contexts as multiples of context")
    mqar_pairs: list[int] = Field([8, 24, 48], min_length=1, description="MQAR pair counts (training samples them uniformly)")
    eval_pairs: int = Field(24, ge=1, description="MQAR pairs in the recall-vs-context sets")
    n_keys: int = Field(64, ge=2)
    n_values: int = Field(64, ge=2)
    timescale_updates: int = Field(6, ge=1, description="short-register writes per training-context length")
    mix: dict[str, float] = Field({"mqar": 0.4, "timescale": 0.2, "copy": 0.2, "text": 0.2})

    @field_validator("eval_multiples")
    @classmethod
    def _multiples(cls, v):
        if v[0] != 1 or sorted(set(v)) != v:
            raise ValueError(f"eval_multiples must be increasing, distinct and start at 1 (got {v})")
        return v

    @model_validator(mode="after")
    def _fits(self):
        from paperworks.hybrid_lm.corpus import TASKS

        bad = sorted(set(self.mix) - set(TASKS))
        if bad or not self.mix or any(w < 0 for w in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError(f"corpus.mix: tasks must be from {list(TASKS)} with non-negative weights summing > 0 (got {self.mix})")
        most = max(max(self.mqar_pairs), self.eval_pairs)
        if most > self.n_keys:
            raise ValueError(f"corpus: {most} MQAR pairs need distinct keys, but n_keys = {self.n_keys}")
        # BOS, pairs, SEP and at least two (query, answer) slots must fit the training context
        need = 1 + 2 * most + 1 + 4
        if need > self.context:
            raise ValueError(f"corpus: {most} MQAR pairs need {need} tokens, more than context = {self.context}")
        return self


class Variant(StrictModel):
    """Overrides of the base model for one variant (only the keys that differ)."""

    overrides: dict[str, Any] = Field(default_factory=dict, description="keys of HybridLMConfig (nested dicts merge)")
    description: str = ""


class GridParams(StrictModel):
    variants: list[str] = Field(min_length=1)
    seeds: list[int] = Field([0, 1], min_length=1)

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v) or any(s < 0 for s in v):
            raise ValueError(f"grid.seeds must be distinct non-negative integers (got {v})")
        return v


class TrainParams(StrictModel):
    steps: int = Field(300, ge=2)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(30, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    log_every: int = Field(10, ge=1)

    @model_validator(mode="after")
    def _enough_logs(self):
        if self.steps // self.log_every < 4:
            raise ValueError(f"train: steps={self.steps} with log_every={self.log_every} logs < 4 points (no curve to judge)")
        return self


class DecodeParams(StrictModel):
    variants: list[str] = Field(["dense", "hybrid"], min_length=1)
    contexts: list[int] = Field([256, 1024, 4096], min_length=1)
    batch: int = Field(4, ge=1)
    steps: int = Field(16, ge=1, description="timed decode steps per context, per repeat")
    repeats: int = Field(7, ge=1, description="timed blocks of `steps` per context; the median block is reported")


class ClaimParams(StrictModel):
    loss_margin: float = Field(0.05, gt=0, description="non-inferiority margin on held-out loss (nats)")
    param_tolerance: float = Field(0.10, gt=0, lt=1, description="largest relative gap in active parameters between compared arms")
    min_learned: float = Field(0.2, gt=0, lt=1, description="a training loss must fall by this share of its start")


class Params(StrictModel):
    corpus: CorpusParams = CorpusParams()
    model: dict[str, Any] = Field(description="the base HybridLMConfig (without vocab_size, which the corpus sets)")
    variants: dict[str, Variant] = Field(min_length=1)
    grid: GridParams
    train: TrainParams = TrainParams()
    decode: DecodeParams = DecodeParams()
    claims: ClaimParams = ClaimParams()

    @model_validator(mode="after")
    def _variants_build(self):
        if "vocab_size" in self.model:
            raise ValueError("model.vocab_size is set by the corpus; remove it")
        for name, v in self.variants.items():
            if "vocab_size" in v.overrides:
                raise ValueError(f"variants.{name}.overrides.vocab_size is set by the corpus; remove it")
            try:
                self.model_config_for(name)
            except ValueError as e:
                raise ValueError(f"variants.{name}: {e}") from None
        for where, names in (("grid.variants", self.grid.variants), ("decode.variants", self.decode.variants)):
            unknown = [n for n in names if n not in self.variants]
            if unknown:
                raise ValueError(f"{where}: unknown variants {unknown} (defined: {sorted(self.variants)})")
            if len(set(names)) != len(names):
                raise ValueError(f"{where}: duplicate variants in {names}")
        return self

    def model_config_for(self, name: str) -> HybridLMConfig:
        """The full config of variant ``name`` (base model + overrides, vocabulary from the corpus)."""
        from paperworks.hybrid_lm.corpus import vocab_size

        merged = _merge(self.model, self.variants[name].overrides)
        merged["vocab_size"] = vocab_size(self.corpus)
        return HybridLMConfig.model_validate(merged)

    def run_names(self) -> list[str]:
        return [run_name(v, s) for v in self.grid.variants for s in self.grid.seeds]


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def _merge(base: dict, overlay: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in overlay.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out
