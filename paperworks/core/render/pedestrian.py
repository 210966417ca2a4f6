"""Procedural pedestrian scenes with controlled attributes.

A :class:`PedestrianSpec` fixes what is in the picture — clothing colours, headwear,
bag, action (pose), object and scene — and :func:`render_pedestrian` draws it as a
small flat-colour image (sim domain) or a degraded one (real domain). Layout jitter
(position, size, background details) comes from the seed, so one spec gives many
distinct images and one (spec, seed, domain) always gives the same bytes.

Body parts are built in body coordinates (hip at the origin, y up, unit = body
height), tilted by the action's lean and placed on the ground or on a vehicle seat.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from paperworks.core.render.canvas import PALETTE, Painter, circle_points, segment_polygon
from paperworks.core.render.domain import RealStyle, apply_domain

COLOURS = tuple(PALETTE)
HEADWEAR = ("none", "helmet", "cap")
BAGS = ("none", "backpack")
ACTIONS = ("standing", "walking", "running", "falling", "lying", "riding", "being_hit")
OBJECTS = ("none", "bicycle", "atv", "car", "umbrella", "dog")
SCENES = ("street", "park", "wooded_trail", "muddy_field", "beach")
RIDEABLE = ("bicycle", "atv")

SKIN = (225, 180, 140)


@dataclass(frozen=True)
class PedestrianSpec:
    upper: str
    lower: str
    headwear: str
    bag: str
    action: str
    object: str
    scene: str

    def __post_init__(self) -> None:
        for name, allowed in (("upper", COLOURS), ("lower", COLOURS), ("headwear", HEADWEAR), ("bag", BAGS),
                              ("action", ACTIONS), ("object", OBJECTS), ("scene", SCENES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} not in {allowed}")
        if not is_consistent(self.action, self.object):
            raise ValueError(f"action {self.action!r} is incompatible with object {self.object!r}")

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def is_consistent(action: str, obj: str) -> bool:
    """Riding needs a bicycle or an ATV; being hit needs the car that hits."""
    if action == "riding":
        return obj in RIDEABLE
    if action == "being_hit":
        return obj == "car"
    return True


# Pose per action: body lean (degrees, + leans right), leg and arm swing (degrees from hanging down).
POSES: dict[str, dict[str, float]] = {
    "standing": {"lean": 0, "leg": 4, "arm": 8},
    "walking": {"lean": 4, "leg": 18, "arm": 22},
    "running": {"lean": 14, "leg": 38, "arm": 55},
    "falling": {"lean": 58, "leg": 22, "arm": 140},
    "lying": {"lean": 90, "leg": 4, "arm": 12},
    "riding": {"lean": 8, "leg": 0, "arm": 65},
    "being_hit": {"lean": -32, "leg": 14, "arm": 125},
}


def _rot(points: list[tuple[float, float]], deg: float) -> np.ndarray:
    a = np.radians(-deg)  # + leans right (clockwise in y-up coordinates)
    r = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return np.asarray(points, dtype=float) @ r.T


def _limb(origin: tuple[float, float], angle_deg: float, length: float) -> tuple[float, float]:
    """End point of a limb hanging from ``origin`` swung ``angle_deg`` (0 = straight down, + forward)."""
    a = np.radians(angle_deg)
    return (origin[0] + length * np.sin(a), origin[1] - length * np.cos(a))


def body_parts(spec: PedestrianSpec) -> list[tuple[list[tuple[float, float]], tuple[int, int, int]]]:
    """Polygons of the person in body coordinates (hip at origin, y up, unit = body height)."""
    pose = POSES[spec.action]
    upper, lower = PALETTE[spec.upper], PALETTE[spec.lower]
    parts: list[tuple[list[tuple[float, float]], tuple[int, int, int]]] = []
    hip, shoulder = (0.0, 0.0), (0.0, 0.31)
    if spec.bag == "backpack":
        parts.append(([(-0.2, 0.05), (-0.08, 0.05), (-0.08, 0.3), (-0.2, 0.3)], (70, 50, 30)))
    if spec.action == "riding":  # thighs forward, shins down
        for dx in (-0.02, 0.02):
            knee = (0.22 + dx, 0.0)
            parts.append((segment_polygon((dx, 0.0), knee, 0.09), lower))
            parts.append((segment_polygon(knee, (knee[0], -0.24), 0.08), lower))
    else:
        for sign in (-1, 1):
            foot = _limb(hip, sign * pose["leg"], 0.47)
            parts.append((segment_polygon(hip, foot, 0.09), lower))
    parts.append(([(-0.11, 0.0), (0.11, 0.0), (0.11, 0.33), (-0.11, 0.33)], upper))  # torso
    for sign in (-1, 1):
        hand = _limb(shoulder, sign * pose["arm"] if spec.action != "riding" else pose["arm"], 0.3)
        parts.append((segment_polygon(shoulder, hand, 0.07), upper))
    head = (0.0, 0.43)
    parts.append((circle_points(*head, 0.09, n=16), SKIN))
    if spec.headwear == "helmet":
        parts.append((circle_points(head[0], head[1] + 0.01, 0.11, n=12, start_deg=0, end_deg=180), (235, 235, 90)))
    elif spec.headwear == "cap":
        parts.append(([(-0.09, 0.47), (0.09, 0.47), (0.09, 0.53), (-0.09, 0.53)], (30, 30, 120)))
        parts.append(([(0.05, 0.47), (0.19, 0.47), (0.19, 0.5), (0.05, 0.5)], (30, 30, 120)))
    return parts


def _draw_background(p: Painter, scene: str, rng: np.random.Generator, ground_y: float) -> None:
    w, h = p.width, p.height
    horizon = ground_y - h * rng.uniform(0.28, 0.38)
    if scene == "street":
        p.rect(0, 0, w, horizon, (150, 170, 195))
        x = -rng.uniform(0, 6)
        while x < w:  # buildings along the horizon
            bw = rng.uniform(6, 12)
            p.rect(x, horizon - rng.uniform(8, 20), x + bw, horizon, tuple(int(v) for v in rng.integers(90, 150, 3)))
            x += bw + 1
        p.rect(0, horizon, w, h, (70, 70, 75))
        for x in np.arange(rng.uniform(0, 6), w, 9):
            p.rect(x, ground_y + 3, x + 5, ground_y + 4.2, (230, 230, 230))
    elif scene == "park":
        p.rect(0, 0, w, horizon, (120, 180, 235))
        p.rect(0, horizon, w, h, (80, 165, 70))
        tx = rng.uniform(0, w)
        p.rect(tx - 1.2, horizon - 8, tx + 1.2, horizon + 2, (95, 60, 30))
        p.circle(tx, horizon - 11, rng.uniform(5, 8), (40, 120, 45))
    elif scene == "wooded_trail":
        p.rect(0, 0, w, h, (35, 85, 40))
        for x in rng.uniform(0, w, 5):
            p.rect(x - 1.5, 0, x + 1.5, horizon + rng.uniform(2, 8), (80, 55, 30))
        p.polygon([(w * 0.4, horizon), (w * 0.6, horizon), (w, h), (0, h)], (150, 115, 75))
    elif scene == "muddy_field":
        p.rect(0, 0, w, horizon, (165, 165, 160))
        p.rect(0, horizon, w, h, (105, 80, 50))
        for _ in range(3):
            cx, cy = rng.uniform(0, w), rng.uniform(horizon + 3, h)
            p.polygon(circle_points(cx, cy, rng.uniform(3, 7), n=14), (70, 50, 30))
    elif scene == "beach":
        p.rect(0, 0, w, horizon - 4, (140, 200, 240))
        p.rect(0, horizon - 4, w, horizon, (40, 100, 190))
        p.rect(0, horizon, w, h, (225, 205, 150))
    else:  # pragma: no cover - guarded by PedestrianSpec
        raise ValueError(scene)


def _wheel(p: Painter, cx: float, cy: float, r: float) -> None:
    p.ring(cx, cy, r, max(r * 0.28, 0.8), (20, 20, 20))


def _draw_vehicle(p: Painter, obj: str, cx: float, ground: float, s: float) -> tuple[float, float]:
    """Draw a bicycle/ATV centred at ``cx``; return the seat point (x, y)."""
    if obj == "bicycle":
        r = 0.14 * s
        back, front = (cx - 0.22 * s, ground - r), (cx + 0.22 * s, ground - r)
        _wheel(p, *back, r)
        _wheel(p, *front, r)
        seat = (cx - 0.06 * s, ground - 0.36 * s)
        frame = (160, 20, 20)
        for a, b in ((back, seat), (seat, front), (back, (cx, ground - r)), ((cx, ground - r), front),
                     (front, (cx + 0.2 * s, ground - 0.4 * s))):
            p.line(a, b, 0.035 * s, frame)
        return seat
    # ATV: chunky body on big wheels
    r = 0.13 * s
    _wheel(p, cx - 0.22 * s, ground - r, r)
    _wheel(p, cx + 0.22 * s, ground - r, r)
    p.rect(cx - 0.32 * s, ground - 0.34 * s, cx + 0.32 * s, ground - 0.17 * s, (95, 110, 40))
    p.rect(cx + 0.14 * s, ground - 0.42 * s, cx + 0.2 * s, ground - 0.34 * s, (40, 40, 40))
    return (cx - 0.05 * s, ground - 0.36 * s)


def _draw_car(p: Painter, right_edge: float, ground: float, s: float, colour: tuple[int, int, int]) -> None:
    left = right_edge - 0.95 * s
    p.rect(left, ground - 0.33 * s, right_edge, ground - 0.1 * s, colour)
    p.polygon([(left + 0.2 * s, ground - 0.33 * s), (left + 0.3 * s, ground - 0.52 * s),
               (right_edge - 0.25 * s, ground - 0.52 * s), (right_edge - 0.12 * s, ground - 0.33 * s)], colour)
    p.rect(right_edge - 0.3 * s, ground - 0.48 * s, right_edge - 0.17 * s, ground - 0.36 * s, (170, 210, 230))
    for x in (left + 0.2 * s, right_edge - 0.2 * s):
        p.circle(x, ground - 0.1 * s, 0.1 * s, (20, 20, 20))


def render_clean(spec: PedestrianSpec, rng: np.random.Generator, width: int = 48, height: int = 64) -> np.ndarray:
    """The sim-domain (flat) render of ``spec``; layout jitter is drawn from ``rng``."""
    p = Painter(width, height)
    ground = height * rng.uniform(0.84, 0.9)
    _draw_background(p, spec.scene, rng, ground)
    s = height * 0.5 * rng.uniform(0.9, 1.08)  # body height in pixels
    beside = spec.object not in ("none", "umbrella") and spec.action not in ("riding", "being_hit")
    cx = width * (rng.uniform(0.3, 0.42) if beside else rng.uniform(0.42, 0.58))
    seat = None
    if spec.action == "riding":
        seat = _draw_vehicle(p, spec.object, cx, ground, s)
    elif spec.object == "car":
        car_colour = tuple(int(v) for v in rng.integers(40, 220, 3))
        gap = 0.05 * s if spec.action == "being_hit" else 0.32 * s
        _draw_car(p, cx - gap, ground, s, car_colour)
    elif spec.object in RIDEABLE:
        _draw_vehicle(p, spec.object, cx + 0.45 * s, ground, s)
    elif spec.object == "dog":
        dx = cx + 0.33 * s
        dog = (60, 40, 25)
        p.rect(dx - 0.12 * s, ground - 0.17 * s, dx + 0.12 * s, ground - 0.08 * s, dog)
        p.circle(dx + 0.14 * s, ground - 0.2 * s, 0.05 * s, dog)
        for lx in (dx - 0.1 * s, dx + 0.09 * s):
            p.rect(lx, ground - 0.09 * s, lx + 0.03 * s, ground, dog)

    parts = body_parts(spec)
    lean = POSES[spec.action]["lean"]
    rotated = [(_rot(pts, lean), colour) for pts, colour in parts]
    if seat is not None:
        off = np.array([seat[0], seat[1]])
        to_img = lambda q: np.column_stack([off[0] + q[:, 0] * s, off[1] - q[:, 1] * s])  # noqa: E731
    else:  # stand (or lie) on the ground: lowest point touches it
        min_y = min(float(q[:, 1].min()) for q, _ in rotated)
        to_img = lambda q: np.column_stack([cx + q[:, 0] * s, ground - (q[:, 1] - min_y) * s])  # noqa: E731
    head_img = None
    for q, colour in rotated:
        pts = to_img(q)
        p.polygon([tuple(v) for v in pts], colour)
        if colour == SKIN:
            head_img = pts.mean(axis=0)
    if spec.object == "umbrella" and head_img is not None:
        hx, hy = float(head_img[0]), float(head_img[1])
        top = hy - 0.14 * s
        p.line((hx + 0.04 * s, top), (hx + 0.04 * s, hy + 0.2 * s), 0.025 * s, (30, 30, 30))
        p.polygon(circle_points(hx + 0.04 * s, top, 0.25 * s, n=14, start_deg=180, end_deg=360), (90, 20, 110))
    return p.to_array()


def render_pedestrian(spec: PedestrianSpec, seed: int, domain: str = "sim", width: int = 48, height: int = 64,
                      style: RealStyle = RealStyle()) -> np.ndarray:
    """Render ``spec`` as an ``height × width × 3`` uint8 image; same arguments → same bytes."""
    rng = np.random.default_rng(seed)
    clean = render_clean(spec, rng, width, height)
    return apply_domain(clean, domain, rng, style)
