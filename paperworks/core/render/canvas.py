"""Supersampled flat-colour drawing on a small canvas (PIL), returned as uint8 numpy arrays.

Shapes are given in *final-image pixel coordinates* (floats, y down); the painter draws
them ``supersample`` times larger and box-filters down, which gives clean anti-aliased
edges at 32–96 px without any randomness. Everything here is deterministic: the same
calls give the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from PIL import Image, ImageDraw

RGB = tuple[int, int, int]
Point = tuple[float, float]

# A small named palette shared by the vision tracks (names double as caption words).
PALETTE: dict[str, RGB] = {
    "red": (200, 30, 35),
    "blue": (35, 70, 200),
    "green": (40, 150, 50),
    "yellow": (235, 210, 40),
    "black": (25, 25, 28),
    "white": (240, 240, 240),
    "gray": (130, 130, 135),
    "orange": (240, 130, 20),
    "purple": (130, 50, 160),
    "brown": (120, 75, 35),
}


def circle_points(cx: float, cy: float, r: float, n: int = 20, start_deg: float = 0.0, end_deg: float = 360.0) -> list[Point]:
    """Polygon approximation of a circle (or an arc when start/end are given)."""
    closed = abs((end_deg - start_deg) % 360.0) < 1e-9
    angles = np.linspace(np.radians(start_deg), np.radians(end_deg), n, endpoint=not closed)
    return [(cx + r * float(np.cos(a)), cy + r * float(np.sin(a))) for a in angles]


def segment_polygon(p0: Point, p1: Point, width: float) -> list[Point]:
    """A thick line from p0 to p1 as a rectangle polygon (limbs, poles, frames)."""
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    length = max(float(np.hypot(dx, dy)), 1e-9)
    nx, ny = -dy / length * width / 2, dx / length * width / 2
    return [(x0 + nx, y0 + ny), (x1 + nx, y1 + ny), (x1 - nx, y1 - ny), (x0 - nx, y0 - ny)]


@dataclass
class Painter:
    """Draw polygons/circles/lines at ``supersample``× and return the box-filtered image."""

    width: int
    height: int
    supersample: int = 4
    background: RGB = (0, 0, 0)

    def __post_init__(self) -> None:
        s = self.supersample
        self._img = Image.new("RGB", (self.width * s, self.height * s), self.background)
        self._draw = ImageDraw.Draw(self._img)

    def _scale(self, pts: Iterable[Point]) -> list[Point]:
        s = self.supersample
        return [(x * s, y * s) for x, y in pts]

    def polygon(self, pts: Sequence[Point], colour: RGB) -> None:
        self._draw.polygon(self._scale(pts), fill=tuple(colour))

    def rect(self, x0: float, y0: float, x1: float, y1: float, colour: RGB) -> None:
        self.polygon([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], colour)

    def circle(self, cx: float, cy: float, r: float, colour: RGB) -> None:
        self.polygon(circle_points(cx, cy, r), colour)

    def ring(self, cx: float, cy: float, r: float, width: float, colour: RGB) -> None:
        pts = circle_points(cx, cy, r, n=24)
        for a, b in zip(pts, pts[1:] + pts[:1]):
            self.polygon(segment_polygon(a, b, width), colour)

    def line(self, p0: Point, p1: Point, width: float, colour: RGB) -> None:
        self.polygon(segment_polygon(p0, p1, width), colour)

    def to_array(self) -> np.ndarray:
        """The final ``height × width × 3`` uint8 image (box-filtered down from the supersampled one)."""
        small = self._img.resize((self.width, self.height), Image.Resampling.BOX)
        return np.asarray(small, dtype=np.uint8).copy()
