"""Beyond the paper, on the trained VQA heads (no retraining): calibrated confidence with abstention, and
robustness to a scanner-like degradation of the test images.

1. **Calibration and abstention.** Per (fusion, seed): the head's dev logits fit one temperature T
   (``core.adaptive.fit_temperature``); confidence = the largest softmax(logits / T) probability. The
   abstention threshold τ is fitted on the dev questions as the lowest confidence that answers at most
   ``reliability.coverage`` of them (``core.adaptive.choose_threshold``, target ``exit_share``); on the test
   questions the head answers where its confidence ≥ τ and abstains elsewhere (the test coverage is what it
   is, not forced to the target).
2. **Degradation.** The test images pass through a declared, seeded transform — Gaussian blur (``blur``
   pixels σ), an intensity drift (``gain`` · x + ``offset``), Gaussian noise (``noise`` grey levels σ), then
   rounding and clipping to uint8 — and are re-encoded by the *frozen* foundation encoder (on the coarse view
   of the degraded image) and the frozen specialists; every trained head answers the test questions from the
   degraded tokens. Accuracy drop = clean − degraded correctness per question.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from scipy.ndimage import gaussian_filter

from paperworks.core.adaptive import choose_threshold, fit_temperature, softmax, threshold_sweep
from paperworks.encoder_fusion.params import DegradeParams


def degrade(images: np.ndarray, p: DegradeParams, seed: int) -> np.ndarray:
    """uint8 N × S × S × C → the same shape and dtype: blur, gain/offset drift, noise (seeded), round, clip.

    The noise field is drawn once per image and shared by its channels (the images are grey in every channel)."""
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(f"images must be uint8 N × S × S × C (got {images.dtype} {images.shape})")
    x = images.astype(np.float64)
    if p.blur > 0:
        x = gaussian_filter(x, sigma=(0, p.blur, p.blur, 0), mode="nearest")
    x = p.gain * x + p.offset
    if p.noise > 0:
        rng = np.random.default_rng(seed)
        x = x + p.noise * rng.standard_normal(x.shape[:3])[..., None]
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def confidence(logits: np.ndarray, temperature: float) -> np.ndarray:
    """The top answer's probability under softmax(logits / T)."""
    return softmax(np.asarray(logits, dtype=np.float64), temperature).max(axis=1)


def calibrate(dev_logits: np.ndarray, dev_answer: np.ndarray) -> float:
    """The temperature fitted on the dev questions (NLL), bounds (0.05, 20)."""
    import warnings

    with warnings.catch_warnings():  # a head that is (nearly) always right sits at the upper bound of 1/T: fine
        warnings.simplefilter("ignore", RuntimeWarning)
        return fit_temperature(dev_logits, dev_answer)


def abstention_threshold(dev_conf: np.ndarray, dev_correct: np.ndarray, coverage: float) -> float:
    """The τ answering the most dev questions with an answered share ≤ ``coverage`` (ties in confidence
    can make the share smaller than the target; coverage 1 answers everything)."""
    if coverage >= 1.0:
        return float("-inf")
    return choose_threshold(threshold_sweep(dev_conf, dev_correct), "exit_share", coverage)


def selective_curve(conf: np.ndarray, correct: np.ndarray, coverages: np.ndarray) -> pd.DataFrame:
    """Accuracy on the answered questions when the most confident ``coverage`` share is answered (ties broken by order)."""
    order = np.argsort(-np.asarray(conf), kind="stable")
    c = np.asarray(correct, dtype=float)[order]
    rows = []
    for cov in coverages:
        n = max(1, int(round(cov * len(c))))
        rows.append({"coverage": float(cov), "answered": n, "accuracy": float(c[:n].mean())})
    return pd.DataFrame(rows)


@torch.no_grad()
def check_tokens_match(cached: torch.Tensor, recomputed: torch.Tensor, name: str, atol: float = 1e-4) -> float:
    """The frozen encoder re-run on the clean images must give back the cached tokens (same weights, same features)."""
    if cached.shape != recomputed.shape:
        raise ValueError(f"{name}: cached tokens {tuple(cached.shape)} vs re-encoded {tuple(recomputed.shape)}")
    diff = float((cached - recomputed).abs().max()) if cached.numel() else 0.0
    if not diff <= atol:
        raise ValueError(f"{name}: re-encoding the clean test images differs from the cached tokens by {diff:.3g} "
                         f"(> {atol}): the encoders and the features are not from the same run")
    return diff
