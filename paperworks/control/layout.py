"""Where the control track's artifacts live, and the fixed seeds every stage shares."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.seeding import derive_seed

MODELS = Path("models/control")
DATA = Path("data/control")
PLOTS = Path("plots/control")
METRICS = Path("metrics/control.json")


def teacher_dir(t: int) -> Path:
    return MODELS / f"teacher_{t}"


def live_dir(t: int) -> Path:
    return PLOTS / f"live_teacher_{t}"


def teacher_eval_path(t: int) -> Path:
    return DATA / "teacher_eval" / f"teacher_{t}.json"


def rollouts_path(t: int, d: int) -> Path:
    return DATA / "rollouts" / f"teacher_{t}_draw_{d}.parquet"


def distill_dir(t: int, d: int) -> Path:
    return DATA / "distill" / f"teacher_{t}_draw_{d}"


def heldout_seeds(global_seed: int, n: int) -> list[int]:
    """The fixed held-out episodes every policy (teacher and every tree) is scored on."""
    return [derive_seed(global_seed, "control", "heldout", i) for i in range(n)]


def robust_seeds(global_seed: int, n: int) -> list[int]:
    return [derive_seed(global_seed, "control", "robust", i) for i in range(n)]
