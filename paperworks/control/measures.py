"""Behaviour measures of a controller: quantization error, chattering, steady-state amplitude."""
from __future__ import annotations

import numpy as np


def quantization_error(teacher_actions: np.ndarray, student_actions: np.ndarray) -> np.ndarray:
    """e_q(s) = π_T(s) − π_S(s), state by state (paper §II-D)."""
    t = np.asarray(teacher_actions, dtype=np.float64)
    s = np.asarray(student_actions, dtype=np.float64)
    if t.shape != s.shape:
        raise ValueError(f"action arrays differ in shape {t.shape} vs {s.shape}")
    return t - s


def error_summary(eq: np.ndarray) -> dict[str, float]:
    eq = np.asarray(eq, dtype=np.float64)
    if eq.size == 0:
        return {"mean_abs": float("nan"), "rms": float("nan"), "max_abs": float("nan")}
    return {"mean_abs": float(np.abs(eq).mean()), "rms": float(np.sqrt((eq**2).mean())), "max_abs": float(np.abs(eq).max())}


def sign_switches(actions: np.ndarray, deadband: float = 0.0) -> int:
    """How often the torque flips sign; with a dead-band, |a| <= deadband counts as 0
    and is skipped, so small jitter around zero is not counted as chattering."""
    a = np.asarray(actions, dtype=np.float64)
    s = np.sign(a)
    s[np.abs(a) <= deadband] = 0
    nz = s[s != 0]
    return int((nz[1:] != nz[:-1]).sum())


def switches_per_second(actions: np.ndarray, dt: float, deadband: float = 0.0) -> float:
    n = len(actions)
    if n < 2:
        return 0.0
    return sign_switches(actions, deadband) / (n * dt)


def steady_state_amplitude(theta: np.ndarray, start: int) -> float:
    """Half peak-to-peak of θ from step ``start`` on (nan when the episode is shorter)."""
    seg = np.asarray(theta, dtype=np.float64)[start:]
    if len(seg) < 2:
        return float("nan")
    return float((seg.max() - seg.min()) / 2)


def distinct_values(actions: np.ndarray, decimals: int = 6) -> int:
    return int(len(np.unique(np.round(np.asarray(actions, dtype=np.float64), decimals))))


def boundedness(thetas: list[np.ndarray], xs: list[np.ndarray], completed: list[bool], theta_bound: float,
                x_bound: float) -> dict:
    """Bounded response of a set of disturbed episodes: an episode is within bounds when it ran to
    the end (the env stops one once |θ| > 0.2) and kept |θ| <= theta_bound and |x| <= x_bound
    throughout. Worst amplitudes are over the episodes that ran to the end (a stopped one left the
    bound at its last step, which is not recorded); ``stopped`` counts the others."""
    if not (len(thetas) == len(xs) == len(completed)) or not thetas:
        raise ValueError("boundedness needs one θ series, x series and completion flag per episode")
    max_theta = [float(np.max(np.abs(t))) for t in thetas]
    max_x = [float(np.max(np.abs(x))) for x in xs]
    within = [bool(c and mt <= theta_bound and mx <= x_bound) for c, mt, mx in zip(completed, max_theta, max_x)]
    ran = [i for i, c in enumerate(completed) if c]
    return {"within": int(sum(within)), "episodes": len(within), "stopped": len(within) - len(ran), "within_each": within,
            "worst_theta": max((max_theta[i] for i in ran), default=None),
            "worst_x": max((max_x[i] for i in ran), default=None),
            "max_abs_theta": max_theta, "max_abs_x": max_x, "completed": [bool(c) for c in completed]}
