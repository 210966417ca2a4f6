"""Shape scenes on a persistent layout with a timed script of events, rendered on demand.

A :class:`SceneSpec` is the whole world of one video (or one still image): a layout of
rooms joined by doors, shapes with a colour and a size, and a script of events — an
object *enters*, *leaves*, *moves* inside its room, *crosses a door* into the next room,
*changes colour* for good, or *flashes* a colour briefly. :class:`Scene` renders any frame
index on demand (nothing but the static background is held in memory) as ``H × W × 3``
uint8, together with the frame's full ground truth (every object's state, pixel box and
visible pixel count, and which events are active).

Coordinates in a spec are normalised (``x, y`` in [0, 1], y down), so one spec renders at
any resolution; object sizes are fractions of ``min(H, W)``. Drawing is plain numpy masks
over pixel centres (hard edges, no randomness), so the label map is exact: in the flat
style every pixel labelled with an object has exactly that object's colour.

:class:`ScenePrompt` is the same world seen as a text-to-image prompt (objects, colours,
counts, spatial relations, style); :func:`realise` turns one into a one-frame
:class:`SceneSpec` that satisfies it, and :func:`random_scene` draws a long scripted video.
Everything is deterministic: same spec (or seed) → same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from paperworks.core.params import StrictModel
from paperworks.core.render.canvas import PALETTE
from paperworks.core.render.domain import RealStyle, to_real

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = tuple(PALETTE)
# Half-extent of a shape as a fraction of min(H, W): 3.2 / 4.8 / 6.4 px at 64 × 64.
SIZES: dict[str, float] = {"small": 0.05, "medium": 0.075, "large": 0.1}
# Floor colours are pale so that no object colour is mistaken for a floor.
FLOORS: dict[str, tuple[int, int, int]] = {
    "sand": (214, 200, 160),
    "sky": (170, 196, 222),
    "mint": (178, 214, 180),
    "rose": (222, 188, 196),
    "lilac": (196, 186, 222),
    "stone": (196, 196, 186),
}
WALL_RGB = (72, 62, 58)
WALL_FRAC = 0.03  # wall thickness as a fraction of min(H, W) (2 px at 64 × 64)
EVENT_KINDS = ("enter", "leave", "move", "cross_door", "change_colour", "flash")
STYLES = ("flat", "textured")
RELATIONS = ("left of", "right of", "above", "below")

ShapeName = Literal["circle", "square", "triangle", "diamond", "cross"]
ColourName = Literal["red", "blue", "green", "yellow", "black", "white", "gray", "orange", "purple", "brown"]
FloorName = Literal["sand", "sky", "mint", "rose", "lilac", "stone"]
SizeName = Literal["small", "medium", "large"]
EventKind = Literal["enter", "leave", "move", "cross_door", "change_colour", "flash"]
Style = Literal["flat", "textured"]
RelationName = Literal["left of", "right of", "above", "below"]
assert set(ColourName.__args__) == set(COLOURS) and set(ShapeName.__args__) == set(SHAPES)  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the typed spec
class Door(StrictModel):
    """A gap in the wall between two adjacent rooms (``at``: centre along the wall, ``width``: fraction of it)."""

    rooms: tuple[int, int]
    at: float = Field(0.5, gt=0.0, lt=1.0)
    width: float = Field(0.3, gt=0.0, lt=1.0)


class Layout(StrictModel):
    """A ``rows × cols`` grid of rooms (row-major ids) with one floor colour each, and doors."""

    cols: int = Field(1, ge=1, le=4)
    rows: int = Field(1, ge=1, le=4)
    floors: tuple[FloorName, ...] = ("sand",)
    doors: tuple[Door, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> "Layout":
        n = self.cols * self.rows
        if len(self.floors) != n:
            raise ValueError(f"floors: {len(self.floors)} given for {n} rooms ({self.rows} rows × {self.cols} cols)")
        for i, d in enumerate(self.doors):
            a, b = d.rooms
            if not (0 <= a < n and 0 <= b < n) or not self.adjacent(a, b):
                raise ValueError(f"doors[{i}]: rooms {d.rooms} are not two adjacent rooms of a {self.rows}×{self.cols} grid")
        return self

    @property
    def n_rooms(self) -> int:
        return self.cols * self.rows

    def adjacent(self, a: int, b: int) -> bool:
        (ra, ca), (rb, cb) = divmod(a, self.cols), divmod(b, self.cols)
        return abs(ra - rb) + abs(ca - cb) == 1

    def room_box(self, room: int) -> tuple[float, float, float, float]:
        """Normalised ``(x0, y0, x1, y1)`` of a room."""
        r, c = divmod(room, self.cols)
        return (c / self.cols, r / self.rows, (c + 1) / self.cols, (r + 1) / self.rows)

    def room_at(self, x: float, y: float) -> int:
        c = min(self.cols - 1, max(0, int(x * self.cols)))
        r = min(self.rows - 1, max(0, int(y * self.rows)))
        return r * self.cols + c

    def side_by_side(self, door: Door) -> bool:
        """True when the door's rooms share a vertical wall (same row), False for a horizontal one."""
        a, b = sorted(door.rooms)
        return divmod(a, self.cols)[0] == divmod(b, self.cols)[0]

    def door_centre(self, door: Door) -> tuple[float, float]:
        """Normalised centre of the door's gap (on the shared wall)."""
        ax0, ay0, ax1, ay1 = self.room_box(min(door.rooms))
        if self.side_by_side(door):
            return (ax1, ay0 + door.at * (ay1 - ay0))
        return (ax0 + door.at * (ax1 - ax0), ay1)  # one above the other: horizontal wall


class SceneObject(StrictModel):
    """A shape at normalised centre ``(x, y)``; ``visible=False`` objects wait for an ``enter`` event."""

    shape: ShapeName
    colour: ColourName
    size: SizeName = "medium"
    x: float = Field(ge=0.0, le=1.0)
    y: float = Field(ge=0.0, le=1.0)
    visible: bool = True


class Event(StrictModel):
    """One scripted event on object ``obj``, active on frames ``start ≤ t < end``.

    - ``enter``: hidden before ``start``, visible from ``start`` at its current position.
    - ``leave``: visible until ``end``, gone from ``end``.
    - ``move``: glides to ``to`` (same room), arriving at frame ``end - 1``.
    - ``cross_door``: glides to the centre of door ``door`` and on to ``to`` in the next room.
    - ``change_colour``: takes ``colour`` from ``start`` on, for good.
    - ``flash``: shows ``colour`` while active, then its own colour again.
    """

    kind: EventKind
    obj: int = Field(ge=0)
    start: int = Field(ge=0)
    end: int = Field(ge=1)
    colour: ColourName | None = None
    to: tuple[float, float] | None = None
    door: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _fields_per_kind(self) -> "Event":
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        need = {"colour": self.kind in ("change_colour", "flash"), "to": self.kind in ("move", "cross_door"),
                "door": self.kind == "cross_door"}
        for name, needed in need.items():
            given = getattr(self, name) is not None
            if needed and not given:
                raise ValueError(f"a {self.kind!r} event needs '{name}'")
            if given and not needed:
                raise ValueError(f"a {self.kind!r} event takes no '{name}'")
        if self.to is not None and not all(0.0 <= v <= 1.0 for v in self.to):
            raise ValueError(f"to={self.to} lies outside the unit square")
        return self


@dataclass(frozen=True)
class ObjectState:
    """Where an object is and how it looks at one frame (normalised coordinates)."""

    visible: bool
    x: float
    y: float
    colour: str


class SceneSpec(StrictModel):
    """The whole world of one video: layout, objects, scripted events, length, style.

    The validator replays the script once, so an event on a hidden object, a move through a
    wall, a door that does not touch the object's room or two overlapping events on one
    object fail here, naming the event.
    """

    layout: Layout = Layout()
    objects: tuple[SceneObject, ...]
    events: tuple[Event, ...] = ()
    n_frames: int = Field(1, ge=1)
    fps: float = Field(2.0, gt=0.0)
    style: Style = "flat"
    seed: int = Field(0, ge=0)  # texture of the textured style; the flat style uses no randomness

    @model_validator(mode="after")
    def _replay_script(self) -> "SceneSpec":
        n_obj = len(self.objects)
        busy_until = [0] * n_obj
        state = [ObjectState(o.visible, o.x, o.y, o.colour) for o in self.objects]
        for i, e in sorted(enumerate(self.events), key=lambda ie: (ie[1].start, ie[0])):
            where = f"events[{i}] ({e.kind} of object {e.obj} at frames {e.start}–{e.end})"
            if e.obj >= n_obj:
                raise ValueError(f"{where}: there are only {n_obj} objects")
            if e.end > self.n_frames:
                raise ValueError(f"{where}: ends after the video's {self.n_frames} frames")
            if e.start < busy_until[e.obj]:
                raise ValueError(f"{where}: overlaps the object's previous event (busy until frame {busy_until[e.obj]})")
            busy_until[e.obj] = e.end
            s = state[e.obj]
            if e.kind == "enter":
                if s.visible:
                    raise ValueError(f"{where}: the object is already visible")
                state[e.obj] = ObjectState(True, s.x, s.y, s.colour)
                continue
            if not s.visible:
                raise ValueError(f"{where}: the object is not visible then")
            if e.kind == "leave":
                state[e.obj] = ObjectState(False, s.x, s.y, s.colour)
            elif e.kind == "change_colour":
                state[e.obj] = ObjectState(True, s.x, s.y, e.colour)
            elif e.kind == "move":
                if self.layout.room_at(*e.to) != self.layout.room_at(s.x, s.y):
                    raise ValueError(f"{where}: target {e.to} is in another room (use cross_door)")
                state[e.obj] = ObjectState(True, e.to[0], e.to[1], s.colour)
            elif e.kind == "cross_door":
                if e.door >= len(self.layout.doors):
                    raise ValueError(f"{where}: there are only {len(self.layout.doors)} doors")
                rooms = set(self.layout.doors[e.door].rooms)
                here, there = self.layout.room_at(s.x, s.y), self.layout.room_at(*e.to)
                if here not in rooms or there not in rooms or here == there:
                    raise ValueError(f"{where}: door {e.door} joins rooms {sorted(rooms)}, "
                                     f"but the object goes from room {here} to room {there}")
                state[e.obj] = ObjectState(True, e.to[0], e.to[1], s.colour)
        return self

    @property
    def duration_s(self) -> float:
        return self.n_frames / self.fps


# ---------------------------------------------------------------- ground truth
@dataclass(frozen=True)
class ObjectTruth:
    """One object at one frame. ``box`` is the pixel box ``(x0, y0, x1, y1)`` (exclusive ends) of
    its full shape before occlusion, ``pixels`` how many pixels of it are visible in the image."""

    id: int
    shape: str
    colour: str
    size: str
    visible: bool
    x: float
    y: float
    room: int
    box: tuple[int, int, int, int] | None
    pixels: int


@dataclass(frozen=True)
class FrameTruth:
    t: int
    objects: tuple[ObjectTruth, ...]
    active_events: tuple[int, ...]  # indices into ``spec.events``

    def visible(self) -> tuple[ObjectTruth, ...]:
        return tuple(o for o in self.objects if o.visible and o.pixels > 0)


# ---------------------------------------------------------------- rendering
def _shape_mask(shape: str, dx: np.ndarray, dy: np.ndarray, r: float) -> np.ndarray:
    """Inside-test of a shape of half-extent ``r`` centred at the origin (``dx``/``dy``: pixel-centre offsets)."""
    if shape == "circle":
        return dx * dx + dy * dy <= r * r
    if shape == "square":
        return (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)  # 0.85: about a circle's area
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= r * 1.15
    if shape == "triangle":  # apex up at −r, base at +0.8 r
        return (dy >= -r) & (dy <= 0.8 * r) & (np.abs(dx) <= (dy + r) / 1.8 * 1.1)
    if shape == "cross":
        arm = r / 3
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= r)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= r))
    raise ValueError(f"unknown shape {shape!r} (allowed: {', '.join(SHAPES)})")


class Scene:
    """Render frames of a :class:`SceneSpec` on demand at ``height × width``.

    Only the static background (floors, walls, floor texture) is kept; ``frame(t)`` draws the
    objects of frame ``t`` over a copy of it.
    """

    def __init__(self, spec: SceneSpec, height: int = 64, width: int = 64) -> None:
        if height < 8 or width < 8:
            raise ValueError(f"frame size {height}×{width} is too small (at least 8×8)")
        self.spec, self.height, self.width = spec, height, width
        self.unit = float(min(height, width))
        self._events_of: list[list[tuple[int, Event]]] = [[] for _ in spec.objects]
        for i, e in sorted(enumerate(spec.events), key=lambda ie: (ie[1].start, ie[0])):
            self._events_of[e.obj].append((i, e))
        self._ys = np.arange(height, dtype=np.float32)[:, None] + 0.5
        self._xs = np.arange(width, dtype=np.float32)[None, :] + 0.5
        self._background = self._draw_background()
        # Textured style: a fixed diagonal stripe gain per pixel, multiplied into object colours.
        stripes = ((np.arange(height)[:, None] + np.arange(width)[None, :]) // 2) % 2
        self._stripe_gain = np.where(stripes == 0, 1.0, 0.78).astype(np.float32)

    def __len__(self) -> int:
        return self.spec.n_frames

    # ---- layout
    def _draw_background(self) -> np.ndarray:
        h, w, lay = self.height, self.width, self.spec.layout
        img = np.zeros((h, w, 3), dtype=np.uint8)
        for room in range(lay.n_rooms):
            x0, y0, x1, y1 = lay.room_box(room)
            img[round(y0 * h): round(y1 * h), round(x0 * w): round(x1 * w)] = FLOORS[lay.floors[room]]
        if self.spec.style == "textured":
            # Persistent floor texture: a coarse random field, upsampled by repetition (seeded by the spec).
            rng = np.random.default_rng([self.spec.seed, 7])
            coarse = rng.uniform(-18, 18, size=(h // 4 + 1, w // 4 + 1, 1)).astype(np.float32)
            tex = np.repeat(np.repeat(coarse, 4, axis=0), 4, axis=1)[:h, :w]
            img = np.clip(img.astype(np.float32) + tex, 0, 255).astype(np.uint8)
        wall = max(1, round(WALL_FRAC * self.unit))
        walled = np.zeros((h, w), dtype=bool)
        walled[:wall], walled[-wall:], walled[:, :wall], walled[:, -wall:] = True, True, True, True
        for c in range(1, lay.cols):  # vertical walls
            x = round(c / lay.cols * w)
            walled[:, x - wall // 2 - wall % 2: x + wall // 2] = True
        for r in range(1, lay.rows):  # horizontal walls
            y = round(r / lay.rows * h)
            walled[y - wall // 2 - wall % 2: y + wall // 2] = True
        for door in lay.doors:  # cut the gaps back out
            cx, cy = lay.door_centre(door)
            a = min(door.rooms)
            ax0, ay0, ax1, ay1 = lay.room_box(a)
            if lay.side_by_side(door):
                half = door.width * (ay1 - ay0) * h / 2
                ys = slice(max(0, round(cy * h - half)), round(cy * h + half))
                x = round(cx * w)
                walled[ys, x - wall: x + wall] = False
            else:
                half = door.width * (ax1 - ax0) * w / 2
                xs = slice(max(0, round(cx * w - half)), round(cx * w + half))
                y = round(cy * h)
                walled[y - wall: y + wall, xs] = False
        img[walled] = WALL_RGB
        return img

    # ---- script
    def state(self, obj: int, t: int) -> tuple[ObjectState, list[int]]:
        """The object's state at frame ``t`` and the indices of its events active then."""
        if not 0 <= t < self.spec.n_frames:
            raise IndexError(f"frame {t} outside 0..{self.spec.n_frames - 1}")
        return self._state_at(obj, t)

    def _state_at(self, obj: int, t: int) -> tuple[ObjectState, list[int]]:
        # No bounds check: t = −1 is the initial state, t = n_frames the state after the last frame.
        o = self.spec.objects[obj]
        visible, x, y, colour = o.visible, o.x, o.y, o.colour
        active: list[int] = []
        for i, e in self._events_of[obj]:
            if t < e.start:
                break
            is_active = t < e.end
            if is_active:
                active.append(i)
            if e.kind == "enter":
                visible = True
            elif e.kind == "leave":
                visible = is_active
            elif e.kind == "change_colour":
                colour = e.colour
            elif e.kind == "flash":
                colour = e.colour if is_active else colour
            else:  # move / cross_door: progress 1/duration at the first frame, 1 at the last
                p = min(1.0, (t - e.start + 1) / (e.end - e.start))
                if e.kind == "move":
                    x, y = x + p * (e.to[0] - x), y + p * (e.to[1] - y)
                else:
                    dx, dy = self.spec.layout.door_centre(self.spec.layout.doors[e.door])
                    if p <= 0.5:
                        x, y = x + 2 * p * (dx - x), y + 2 * p * (dy - y)
                    else:
                        x, y = dx + (2 * p - 1) * (e.to[0] - dx), dy + (2 * p - 1) * (e.to[1] - dy)
        return ObjectState(visible, x, y, colour), active

    def event_records(self) -> list[dict]:
        """One row per event in time order, with the object's state just before, during and after it.

        Keys: ``event`` (index into ``spec.events``), ``kind``, ``obj``, ``shape``, ``size``, ``start``,
        ``end`` (frames), ``start_s``, ``end_s`` (seconds), ``colour_before``/``colour_during``/``colour_after``,
        ``room_before``/``room_after``, ``visible_before``/``visible_after``, ``door`` (−1 if none).
        The material for question generation (what flashed, who entered, which came first, how many).
        """
        lay, fps = self.spec.layout, self.spec.fps
        rows = []
        for i, e in sorted(enumerate(self.spec.events), key=lambda ie: (ie[1].start, ie[0])):
            before, _ = self._state_at(e.obj, e.start - 1)
            during, _ = self._state_at(e.obj, e.start)
            after, _ = self._state_at(e.obj, e.end)
            o = self.spec.objects[e.obj]
            rows.append({
                "event": i, "kind": e.kind, "obj": e.obj, "shape": o.shape, "size": o.size,
                "start": e.start, "end": e.end, "start_s": e.start / fps, "end_s": e.end / fps,
                "colour_before": before.colour, "colour_during": during.colour, "colour_after": after.colour,
                "room_before": lay.room_at(before.x, before.y), "room_after": lay.room_at(after.x, after.y),
                "visible_before": before.visible, "visible_after": after.visible,
                "door": -1 if e.door is None else e.door,
            })
        return rows

    def active_events(self, t: int) -> tuple[int, ...]:
        return tuple(i for i, e in enumerate(self.spec.events) if e.start <= t < e.end)

    # ---- drawing
    def _object_box(self, obj: int, st: ObjectState) -> tuple[int, int, int, int] | None:
        r = SIZES[self.spec.objects[obj].size] * self.unit
        cx, cy = st.x * self.width, st.y * self.height
        x0, x1 = max(0, int(np.floor(cx - r))), min(self.width, int(np.ceil(cx + r)) + 1)
        y0, y1 = max(0, int(np.floor(cy - r))), min(self.height, int(np.ceil(cy + r)) + 1)
        return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None

    def _render(self, t: int, domain: str = "sim", with_truth: bool = True
                ) -> tuple[np.ndarray, np.ndarray | None, FrameTruth | None]:
        if domain not in ("sim", "real"):
            raise ValueError(f"unknown domain {domain!r} (allowed: sim, real)")
        img = self._background.copy()
        labels = np.full((self.height, self.width), -1, dtype=np.int16) if with_truth else None
        states, boxes = [], []
        textured = self.spec.style == "textured"
        for k, o in enumerate(self.spec.objects):  # later objects are drawn on top
            st, _ = self.state(k, t)
            states.append(st)
            box = None
            if st.visible:
                cand = self._object_box(k, st)
                if cand is not None:
                    x0, y0, x1, y1 = cand
                    mask = _shape_mask(o.shape, self._xs[:, x0:x1] - st.x * self.width,
                                       self._ys[y0:y1] - st.y * self.height, SIZES[o.size] * self.unit)
                    rgb = PALETTE[st.colour]
                    if textured:
                        patch = (self._stripe_gain[y0:y1, x0:x1, None] * np.asarray(rgb, dtype=np.float32)).astype(np.uint8)
                        img[y0:y1, x0:x1][mask] = patch[mask]
                    else:
                        img[y0:y1, x0:x1][mask] = rgb
                    if with_truth and mask.any():
                        rows, cols = np.nonzero(mask)
                        box = (x0 + int(cols.min()), y0 + int(rows.min()), x0 + int(cols.max()) + 1, y0 + int(rows.max()) + 1)
                        labels[y0:y1, x0:x1][mask] = k
            boxes.append(box)
        if domain == "real":
            img = to_real(img, np.random.default_rng([self.spec.seed, t, 11]), RealStyle())
        if not with_truth:
            return img, None, None
        counts = np.bincount(labels.ravel() + 1, minlength=len(self.spec.objects) + 1)[1:]
        lay = self.spec.layout
        truth = FrameTruth(
            t=t,
            objects=tuple(
                ObjectTruth(id=k, shape=o.shape, colour=st.colour, size=o.size, visible=st.visible, x=st.x, y=st.y,
                            room=lay.room_at(st.x, st.y), box=boxes[k], pixels=int(counts[k]))
                for k, (o, st) in enumerate(zip(self.spec.objects, states))
            ),
            active_events=self.active_events(t),
        )
        return img, labels, truth

    def frame(self, t: int, domain: str = "sim") -> np.ndarray:
        """Frame ``t`` as ``H × W × 3`` uint8 (``domain="real"``: degraded, seeded by (spec.seed, t))."""
        return self._render(t, domain, with_truth=False)[0]

    def frames(self, ts: Sequence[int], domain: str = "sim") -> np.ndarray:
        """Frames at the given indices stacked as ``N × H × W × 3`` (only these are rendered)."""
        out = np.empty((len(ts), self.height, self.width, 3), dtype=np.uint8)
        for j, t in enumerate(ts):
            out[j] = self._render(int(t), domain, with_truth=False)[0]
        return out

    def labels(self, t: int) -> np.ndarray:
        """Instance map of frame ``t``: object id per pixel, −1 for background."""
        return self._render(t)[1]

    def truth(self, t: int) -> FrameTruth:
        return self._render(t)[2]

    def render(self, t: int, domain: str = "sim") -> tuple[np.ndarray, np.ndarray, FrameTruth]:
        """Image, instance map and ground truth of frame ``t`` in one pass."""
        return self._render(t, domain)


def render_frame(spec: SceneSpec, t: int = 0, height: int = 64, width: int = 64, domain: str = "sim") -> np.ndarray:
    return Scene(spec, height, width).frame(t, domain)


def _centres_hold(ax: float, ay: float, bx: float, by: float, relation: str, margin: float) -> bool:
    if relation == "left of":
        return ax < bx - margin
    if relation == "right of":
        return ax > bx + margin
    if relation == "above":
        return ay < by - margin
    if relation == "below":
        return ay > by + margin
    raise ValueError(f"unknown relation {relation!r} (allowed: {', '.join(RELATIONS)})")


def relation_holds(a: ObjectTruth, b: ObjectTruth, relation: str, margin: float = 0.05) -> bool:
    """Whether ``a`` is ``relation`` ``b`` by their centres, with a normalised ``margin``."""
    return _centres_hold(a.x, a.y, b.x, b.y, relation, margin)


# ---------------------------------------------------------------- random scripted videos
@dataclass(frozen=True)
class ScriptConfig:
    """How :func:`random_scene` draws a video. ``exclusive``: no two events overlap in time."""

    n_frames: int = 1200
    fps: float = 2.0
    cols: int = 2
    rows: int = 1
    n_visible: tuple[int, int] = (3, 5)  # objects present at frame 0 (inclusive range)
    n_hidden: int = 2  # objects that can enter later
    n_events: int = 12
    event_frames: tuple[int, int] = (4, 8)  # 2–4 s at 2 fps (inclusive range)
    kinds: tuple[str, ...] = EVENT_KINDS
    sizes: tuple[str, ...] = tuple(SIZES)
    exclusive: bool = True
    style: str = "flat"

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in EVENT_KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds: {bad or 'empty'} (allowed: {', '.join(EVENT_KINDS)})")
        if self.event_frames[0] < 1 or self.event_frames[1] < self.event_frames[0]:
            raise ValueError(f"event_frames={self.event_frames} is not a range of ≥ 1 frames")
        if self.n_events * self.event_frames[1] >= self.n_frames:
            raise ValueError(f"{self.n_events} events of up to {self.event_frames[1]} frames do not fit {self.n_frames} frames")
        if self.style not in STYLES:
            raise ValueError(f"style={self.style!r} (allowed: {', '.join(STYLES)})")


def _random_point(rng: np.random.Generator, layout: Layout, room: int, half: float) -> tuple[float, float]:
    """A centre inside ``room`` keeping the shape (half-extent ``half``) off the walls."""
    x0, y0, x1, y1 = layout.room_box(room)
    m = half + 1.5 * WALL_FRAC
    if x1 - x0 <= 2 * m or y1 - y0 <= 2 * m:
        raise ValueError(f"room {room} ({x1 - x0:.2f} × {y1 - y0:.2f}) is too small for a shape of half-extent {half}")
    return (round(float(rng.uniform(x0 + m, x1 - m)), 4), round(float(rng.uniform(y0 + m, y1 - m)), 4))


def random_layout(rng: np.random.Generator, cols: int, rows: int) -> Layout:
    n = cols * rows
    floors = tuple(str(f) for f in rng.choice(list(FLOORS), size=n, replace=n > len(FLOORS)))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if Layout(cols=cols, rows=rows, floors=floors).adjacent(a, b)]
    doors = tuple(Door(rooms=p, at=round(float(rng.uniform(0.35, 0.65)), 3), width=0.3) for p in pairs)
    return Layout(cols=cols, rows=rows, floors=floors, doors=doors)


def random_scene(seed: int, cfg: ScriptConfig = ScriptConfig()) -> SceneSpec:
    """A scripted video drawn from ``seed``: layout, objects, and ``cfg.n_events`` events in time order."""
    rng = np.random.default_rng(seed)
    layout = random_layout(rng, cfg.cols, cfg.rows)
    n_visible = int(rng.integers(cfg.n_visible[0], cfg.n_visible[1] + 1))
    objects = []
    for k in range(n_visible + cfg.n_hidden):
        size = str(rng.choice(cfg.sizes))
        x, y = _random_point(rng, layout, int(rng.integers(layout.n_rooms)), SIZES[size])
        objects.append(SceneObject(shape=str(rng.choice(SHAPES)), colour=str(rng.choice(COLOURS)), size=size,
                                   x=x, y=y, visible=k < n_visible))
    # Event times: durations first, then the free frames split into random gaps (frame 0 stays event-free).
    durations = rng.integers(cfg.event_frames[0], cfg.event_frames[1] + 1, size=cfg.n_events)
    if cfg.exclusive:
        free = cfg.n_frames - 1 - int(durations.sum())
        gaps = np.floor(rng.dirichlet(np.ones(cfg.n_events + 1)) * free).astype(int)
        starts = 1 + np.cumsum(gaps[:-1]) + np.concatenate([[0], np.cumsum(durations)[:-1]])
    else:
        starts = np.sort(rng.integers(1, cfg.n_frames - durations.max(), size=cfg.n_events))
    visible = [o.visible for o in objects]
    pos = [(o.x, o.y) for o in objects]
    colour = [o.colour for o in objects]
    busy_until = [0] * len(objects)
    events: list[Event] = []
    for start, dur in zip(starts.tolist(), durations.tolist()):
        end = start + dur
        free_objs = [k for k in range(len(objects)) if busy_until[k] <= start]
        shown = [k for k in free_objs if visible[k]]
        options = {
            "enter": [k for k in free_objs if not visible[k]],
            "leave": shown if sum(visible) > 1 else [],
            "move": shown, "change_colour": shown, "flash": shown,
            "cross_door": [k for k in shown if any(layout.room_at(*pos[k]) in d.rooms for d in layout.doors)],
        }
        kinds = [k for k in cfg.kinds if options[k]]
        if not kinds:
            continue
        kind = str(rng.choice(kinds))
        k = int(rng.choice(options[kind]))
        half = SIZES[objects[k].size]
        room = layout.room_at(*pos[k])
        if kind == "enter":
            visible[k] = True
            events.append(Event(kind=kind, obj=k, start=start, end=end))
        elif kind == "leave":
            visible[k] = False
            events.append(Event(kind=kind, obj=k, start=start, end=end))
        elif kind in ("change_colour", "flash"):
            new = str(rng.choice([c for c in COLOURS if c != colour[k]]))
            if kind == "change_colour":
                colour[k] = new
            events.append(Event(kind=kind, obj=k, start=start, end=end, colour=new))
        elif kind == "move":
            to = _random_point(rng, layout, room, half)
            pos[k] = to
            events.append(Event(kind=kind, obj=k, start=start, end=end, to=to))
        else:
            doors = [i for i, d in enumerate(layout.doors) if room in d.rooms]
            d = int(rng.choice(doors))
            other = [r for r in layout.doors[d].rooms if r != room][0]
            to = _random_point(rng, layout, other, half)
            pos[k] = to
            events.append(Event(kind=kind, obj=k, start=start, end=end, to=to, door=d))
        busy_until[k] = end
    return SceneSpec(layout=layout, objects=tuple(objects), events=tuple(events), n_frames=cfg.n_frames,
                     fps=cfg.fps, style=cfg.style, seed=seed)


# ---------------------------------------------------------------- the spec as a text-to-image prompt
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six")


class PromptItem(StrictModel):
    shape: ShapeName
    colour: ColourName
    count: int = Field(1, ge=1, le=6)
    size: SizeName = "medium"


class Relation(StrictModel):
    """``items[subject]`` is ``relation`` ``items[object]`` (first instance of each)."""

    subject: int = Field(ge=0)
    relation: RelationName
    object: int = Field(ge=0)


class ScenePrompt(StrictModel):
    """What a text-to-image request asks for: objects with colours and counts, relations, style."""

    items: tuple[PromptItem, ...] = Field(min_length=1)
    relations: tuple[Relation, ...] = ()
    style: Style = "flat"
    floor: FloorName = "sand"

    @model_validator(mode="after")
    def _check(self) -> "ScenePrompt":
        for i, r in enumerate(self.relations):
            if max(r.subject, r.object) >= len(self.items) or r.subject == r.object:
                raise ValueError(f"relations[{i}]: needs two different items among {len(self.items)}")
        if sum(it.count for it in self.items) > 12:
            raise ValueError("more than 12 objects do not fit one 64×64 picture")
        return self

    def text(self) -> str:
        """An English prompt, e.g. ``two red circles and a small blue square; the red circle is left of the blue square``."""
        def noun(it: PromptItem, n: int) -> str:
            size = f"{it.size} " if it.size != "medium" else ""
            plural = "es" if it.shape == "cross" else "s"
            return f"{size}{it.colour} {it.shape}{plural if n > 1 else ''}"

        parts = [f"{'a' if it.count == 1 else NUMBER_WORDS[it.count]} {noun(it, it.count)}" for it in self.items]
        text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        rels = [f"the {noun(self.items[r.subject], 1)} is {r.relation} the {noun(self.items[r.object], 1)}"
                for r in self.relations]
        return "; ".join([text, *rels]) + f" ({self.style} style, {self.floor} floor)"


def realise(prompt: ScenePrompt, seed: int, max_tries: int = 500) -> SceneSpec:
    """A one-frame, one-room :class:`SceneSpec` that satisfies ``prompt`` (placement by rejection).

    Objects do not overlap (centres ≥ the two half-extents apart), and every relation holds
    with :func:`relation_holds`'s margin. The first instance of each item is ``objects``' first
    entry for that item, in item order; a relation refers to those.
    """
    rng = np.random.default_rng(seed)
    layout = Layout(floors=(prompt.floor,))
    kinds = [(i, it) for i, it in enumerate(prompt.items) for _ in range(it.count)]
    for _ in range(max_tries):
        placed: list[tuple[float, float, float]] = []
        ok = True
        for _, it in kinds:
            half = SIZES[it.size]
            for _ in range(50):
                x, y = _random_point(rng, layout, 0, half)
                if all((x - px) ** 2 + (y - py) ** 2 >= (half + ph + 0.02) ** 2 for px, py, ph in placed):
                    placed.append((x, y, half))
                    break
            else:
                ok = False
                break
        if not ok:
            continue
        first = {}
        for j, (i, _) in enumerate(kinds):
            first.setdefault(i, j)
        if all(_centres_hold(*placed[first[r.subject]][:2], *placed[first[r.object]][:2], r.relation, 0.05)
               for r in prompt.relations):
            objects = tuple(SceneObject(shape=it.shape, colour=it.colour, size=it.size, x=x, y=y)
                            for (_, it), (x, y, _) in zip(kinds, placed))
            return SceneSpec(layout=layout, objects=objects, n_frames=1, style=prompt.style, seed=seed)
    raise ValueError(f"could not place {prompt.text()!r} in {max_tries} tries (contradictory relations or too many objects)")
