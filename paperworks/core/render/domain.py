"""Rendering domains: *sim* (clean, flat colours) and *real* (texture, noise, blur, light, occlusion).

A Sim2Real setting needs a gap a model trained on flat renders must cross. The *real*
transform degrades a clean render with effects drawn from a seeded ``numpy`` Generator,
so the same seed gives the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

DOMAINS = ("sim", "real")


@dataclass(frozen=True)
class RealStyle:
    """Strength of each real-domain effect (ranges are sampled uniformly per image)."""

    texture_std: float = 14.0  # low-frequency background/colour texture (pixel units)
    noise_std: tuple[float, float] = (4.0, 12.0)  # per-pixel sensor noise
    blur_sigma: tuple[float, float] = (0.3, 1.0)  # Gaussian blur (pixels)
    brightness: tuple[float, float] = (0.65, 1.3)  # global gain
    colour_cast: float = 0.14  # per-channel gain in [1 - c, 1 + c]
    occlusion_prob: float = 0.35  # chance of one occluding bar (pole, sign, passer-by)
    occlusion_frac: tuple[float, float] = (0.12, 0.3)  # occluder width as a fraction of the image


def _low_freq_noise(rng: np.random.Generator, h: int, w: int, cells: int = 6) -> np.ndarray:
    """Smooth noise: a coarse random grid bilinearly upsampled (uneven lighting, dirt, texture)."""
    coarse = rng.standard_normal((cells, cells, 3)).astype(np.float32)
    img = Image.fromarray(((coarse - coarse.min()) / (np.ptp(coarse) + 1e-6) * 255).astype(np.uint8))
    up = np.asarray(img.resize((w, h), Image.Resampling.BILINEAR), dtype=np.float32)
    return (up / 255.0 - 0.5) * 2.0


def to_real(clean: np.ndarray, rng: np.random.Generator, style: RealStyle = RealStyle()) -> np.ndarray:
    """Degrade a clean ``H × W × 3`` uint8 render into the *real* domain (deterministic given ``rng``)."""
    h, w, _ = clean.shape
    img = clean.astype(np.float32)
    img += _low_freq_noise(rng, h, w) * style.texture_std
    if rng.random() < style.occlusion_prob:
        # A vertical bar in front of the scene, never wider than a third of the image.
        bar_w = max(2, int(round(w * rng.uniform(*style.occlusion_frac))))
        x0 = int(rng.integers(0, w - bar_w + 1))
        y0 = int(rng.integers(0, h // 3))
        shade = rng.uniform(40, 200)
        img[y0:, x0 : x0 + bar_w] = shade + rng.standard_normal(3).astype(np.float32) * 15
    gain = rng.uniform(*style.brightness) * rng.uniform(1 - style.colour_cast, 1 + style.colour_cast, size=3)
    img = img * gain.astype(np.float32)
    blurred = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(radius=float(rng.uniform(*style.blur_sigma)))
    )
    img = np.asarray(blurred, dtype=np.float32)
    img += rng.standard_normal(img.shape).astype(np.float32) * rng.uniform(*style.noise_std)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def apply_domain(clean: np.ndarray, domain: str, rng: np.random.Generator, style: RealStyle = RealStyle()) -> np.ndarray:
    if domain == "sim":
        return clean
    if domain == "real":
        return to_real(clean, rng, style)
    raise ValueError(f"unknown domain {domain!r} (allowed: {', '.join(DOMAINS)})")
