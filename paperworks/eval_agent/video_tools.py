"""Clip-level tools of the text-to-video suite, and the one rule per dimension that reads a clip.

A clip (``T × H × W × 3`` uint8) is read by the image tools of ``tools.py`` **frame by frame**
(the fitted component heads and noise meter: per frame a :class:`~paperworks.eval_agent.world.Parse`)
plus three clip-level measures that need no learning:

- **floor**: the fitted background plane's mean colour (``tools.background_plane`` via
  ``tools.components``) → the nearest floor of the palette by chromaticity (rgb / sum), so a
  brightness change (flicker, a dim look) does not change the floor's name;
- **flicker**: the std over frames of the background plane's mean brightness, ÷ its mean;
- **style**: a matched filter for the textured style's diagonal stripes: the mean brightness of
  object pixels on the stripe pattern's dark phase ÷ that on its bright phase, pooled over frames
  (textured ≈ 0.78, flat ≈ 1).

The subject's track is the per-frame centre of the prompt's first shape in the frame parses.
Nothing here takes a generator: a tool sees only the clip's pixels (and, as every check does,
the prompt). :func:`check_clip` is the same rule on the tools' reading and on the renderer's truth.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from paperworks.core.render.scene import COLOURS, FLOORS, SHAPES, ScenePrompt
from paperworks.eval_agent.tools import FOREGROUND, N_IMAGE_FEATURES, ToolHeads, components, read_detections
from paperworks.eval_agent.world import Parse, check

MOTIONS = ("none", "left", "right", "up", "down")
DIRECTION = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}
FLOOR_NAMES = tuple(FLOORS)
_FLOOR_CHROMA = np.array([np.asarray(FLOORS[f], dtype=float) / sum(FLOORS[f]) for f in FLOOR_NAMES])
STYLE_RATIO = 0.89   # stripe ratio below this reads "textured" (the stripes' gain is 0.78)
BORDER = 3           # px of wall excluded from the background measures (as tools.components)


@dataclass(frozen=True)
class ClipParse:
    """What a clip shows: per frame a :class:`Parse` and the floor's name; the clip's flicker and style."""

    frames: tuple[Parse, ...]
    floors: tuple[str, ...]
    flicker: float
    style: str


def floor_of(rgb: np.ndarray) -> str:
    """The palette floor nearest a mean background colour by chromaticity."""
    c = np.asarray(rgb, dtype=float)
    c = c / max(c.sum(), 1e-6)
    return FLOOR_NAMES[int(np.argmin(((_FLOOR_CHROMA - c) ** 2).sum(1)))]


def stripe_phase(h: int, w: int) -> np.ndarray:
    """The textured style's stripe pattern (True: the darker phase), as ``core.render.scene.Scene`` draws it."""
    return (((np.arange(h)[:, None] + np.arange(w)[None, :]) // 2) % 2).astype(bool)


def flicker_of(brightness: np.ndarray) -> float:
    b = np.asarray(brightness, dtype=float)
    return float(b.std() / max(b.mean(), 1e-6))


@dataclass
class _Frames:
    dets: list
    feats: list
    floors: list
    bright: list
    dark_sum: float = 0.0
    dark_n: int = 0
    light_sum: float = 0.0
    light_n: int = 0


def _measure(clip: np.ndarray, acc: _Frames) -> None:
    t_, h, w, _ = clip.shape
    phase = stripe_phase(h, w)
    inner = np.zeros((h, w), dtype=bool)
    inner[BORDER:-BORDER, BORDER:-BORDER] = True
    for img in clip:
        comps, bg, imf = components(img)
        acc.dets.append(comps)
        acc.feats.append(imf)
        mean_bg = bg[inner].mean(0)
        acc.floors.append(floor_of(mean_bg))
        acc.bright.append(float(mean_bg.mean()))
        f = img.astype(np.float32)
        smooth = ndimage.median_filter(f, size=(3, 3, 1))
        mask = ndimage.binary_erosion((np.linalg.norm(smooth - bg, axis=2) > FOREGROUND) & inner)
        grey = f.mean(2)
        acc.dark_sum += float(grey[mask & phase].sum())
        acc.dark_n += int((mask & phase).sum())
        acc.light_sum += float(grey[mask & ~phase].sum())
        acc.light_n += int((mask & ~phase).sum())


def style_from(dark_sum: float, dark_n: int, light_sum: float, light_n: int) -> str:
    if dark_n < 10 or light_n < 10 or light_sum <= 0:
        return "flat"
    return "textured" if (dark_sum / dark_n) / (light_sum / light_n) < STYLE_RATIO else "flat"


def read_clips(model: ToolHeads, clips: list[np.ndarray], noise_max: float) -> list[ClipParse]:
    """The tools' reading of each clip (frame-wise image tools, batched over every frame, + clip measures)."""
    per_clip = []
    all_dets, all_feats = [], []
    for clip in clips:
        acc = _Frames([], [], [], [])
        _measure(np.asarray(clip), acc)
        per_clip.append(acc)
        all_dets += acc.dets
        all_feats += acc.feats
    parses = read_detections(model, all_dets, np.array(all_feats, dtype=np.float32).reshape(-1, N_IMAGE_FEATURES), noise_max)
    out, j = [], 0
    for acc in per_clip:
        n = len(acc.dets)
        out.append(ClipParse(tuple(parses[j:j + n]), tuple(acc.floors), flicker_of(np.array(acc.bright)),
                             style_from(acc.dark_sum, acc.dark_n, acc.light_sum, acc.light_n)))
        j += n
    return out


# ---------------------------------------------------------------- the rule per dimension
@dataclass(frozen=True)
class Thresholds:
    quality: float     # imaging_quality: mean per-frame noise std below this (the image suite's quality threshold)
    flicker: float
    jerk: float
    dynamic: float


def track(clip: ClipParse, shape: int) -> np.ndarray:
    """T × 2 centres of ``shape`` per frame (NaN where absent)."""
    return np.array([[f.x[shape], f.y[shape]] if f.count[shape] >= 1 else [np.nan, np.nan] for f in clip.frames], dtype=float)


def jerk(points: np.ndarray) -> float:
    """RMS norm of the track's second differences (0 for a constant-speed glide); inf with a gap."""
    if len(points) < 3 or np.isnan(points).any():
        return float("inf")
    d2 = points[2:] - 2 * points[1:-1] + points[:-2]
    return float(np.sqrt((d2 ** 2).sum(1).mean()))


def _modal_share(values: list) -> int:
    if not values:
        return 0
    _, counts = np.unique(np.array(values, dtype=object).astype(str), return_counts=True)
    return int(counts.max())


def check_clip(dim: str, scene: ScenePrompt, motion: str, clip: ClipParse, th: Thresholds) -> bool:
    """Does a clip read as ``clip`` satisfy the prompt on this dimension? (Same rule for the renderer's truth and the tools.)"""
    t_ = len(clip.frames)
    s0 = SHAPES.index(scene.items[0].shape)
    c0 = COLOURS.index(scene.items[0].colour)
    majority = (t_ + 1) // 2

    def frames_ok(frame_dim: str) -> bool:
        return sum(check(frame_dim, scene, f, th.quality) for f in clip.frames) >= majority

    def subject_present() -> bool:
        return sum(int(f.count[s0] >= 1) for f in clip.frames) >= majority

    def subject_colour() -> bool:
        return sum(int(f.count[s0] >= 1 and f.colour[s0] == c0) for f in clip.frames) >= majority

    def displacement() -> np.ndarray | None:
        p = track(clip, s0)
        if np.isnan(p[0]).any() or np.isnan(p[-1]).any():
            return None
        return p[-1] - p[0]

    def action_ok() -> bool:
        d = displacement()
        if d is None:
            return False
        u = np.array(DIRECTION[motion])
        along, across = float(d @ u), abs(float(d[0] * u[1] - d[1] * u[0]))
        return along >= th.dynamic and across < along

    if dim == "subject_consistency":  # the subject keeps one look: present with its modal colour in all but ≤ 1 frame
        seen = [int(f.colour[s0]) for f in clip.frames if f.count[s0] >= 1]
        present = len(seen)
        return present >= t_ - 1 and sum(int(c == np.bincount(seen).argmax()) for c in seen) >= t_ - 1
    if dim == "background_consistency":
        return _modal_share(list(clip.floors)) >= t_ - 1
    if dim == "temporal_flickering":
        return clip.flicker < th.flicker
    if dim == "motion_smoothness":
        return jerk(track(clip, s0)) < th.jerk
    if dim == "dynamic_degree":
        d = displacement()
        return d is not None and float(np.hypot(*d)) >= th.dynamic
    if dim == "imaging_quality":
        return float(np.mean([f.noise for f in clip.frames])) < th.quality
    if dim == "object_class":
        return subject_present()
    if dim == "multiple_objects":
        return frames_ok("presence")
    if dim == "object_action":
        return action_ok()
    if dim == "colour":
        return frames_ok("colour")
    if dim == "spatial_relationship":
        return frames_ok("spatial")
    if dim == "scene":
        floors, counts = np.unique(np.array(clip.floors), return_counts=True)
        return str(floors[int(np.argmax(counts))]) == scene.floor
    if dim == "appearance_style":
        return clip.style == scene.style
    if dim == "overall_consistency":  # every attribute of the prompt at once
        floors, counts = np.unique(np.array(clip.floors), return_counts=True)
        ok = subject_colour() and str(floors[int(np.argmax(counts))]) == scene.floor and clip.style == scene.style
        return bool(ok and (motion == "none" or action_ok()))
    raise ValueError(f"unknown text-to-video dimension {dim!r}")
