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


def teacher_seed(global_seed: int, slot: int, attempt: int) -> int:
    """TD3 seed of teacher slot ``slot``: attempt 0 is the slot's own seed, attempts 1, 2, … its
    declared reserves (``control.teacher.reserve_attempts``), trained only when the one before
    ended at the step cap without a passing validation."""
    if attempt == 0:
        return derive_seed(global_seed, "control", "teacher", slot)
    return derive_seed(global_seed, "control", "teacher_reserve", slot, attempt)


def teacher_validation_episodes(global_seed: int, teacher) -> list[tuple[int, float | None]]:
    """(seed, reset_noise_scale) of the teacher-validation episodes, shared by every slot; the
    last ``validation_wide_episodes`` start at the wider reset noise. Their seeds come from their
    own stream, apart from the rollout, distillation-validation and held-out seeds."""
    n, wide = teacher.validation_episodes, teacher.validation_wide_episodes
    return [(derive_seed(global_seed, "control", "teacher_validation", i),
             teacher.validation_wide_reset_noise if i >= n - wide else None) for i in range(n)]


def distill_validation_seeds(global_seed: int, t: int, d: int, n: int) -> list[int]:
    """Episodes every recipe of pair (t, d) picks its best candidate tree on."""
    return [derive_seed(global_seed, "control", "validation", t, d, i) for i in range(n)]


def heldout_seeds(global_seed: int, n: int) -> list[int]:
    """The fixed held-out episodes every policy (teacher and every tree) is scored on."""
    return [derive_seed(global_seed, "control", "heldout", i) for i in range(n)]


def robust_seeds(global_seed: int, n: int) -> list[int]:
    """The hard held-out set: starts at a 10× reset noise, with observation noise."""
    return [derive_seed(global_seed, "control", "robust", i) for i in range(n)]


def disturbance_seeds(global_seed: int, n: int) -> list[int]:
    """Seeds of the boundedness episodes' pulse trains (starts are the nominal held-out ones)."""
    return [derive_seed(global_seed, "control", "disturbance", i) for i in range(n)]
