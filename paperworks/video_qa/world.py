"""The video QA world: long scripted shape videos and multiple-choice questions read off their truth.

A video is a :class:`~paperworks.core.render.scene.SceneSpec` from ``random_scene``: two rooms whose
floors and walls persist, 4–5 objects of **distinct shapes** (so "the circle" names one object)
and a script of brief events (2–4 s at 2 fps). Questions (4 options each) come from the script
replayed frame by frame, never from a model:

- **global** — "What colour was the <shape> for most of the video?" (an object that changed
  colour once): needs frames from the whole video; a short crop sees one colour only.
- **local** — "What colour did the <shape> flash?": the flash lasts 4–8 of 1,200 frames, so 64
  uniform frames miss it most of the time.
- **temporal** — "What colour was the <shape> before it changed colour?": the order of two
  colours; the colour after the change is a distractor.
- **counting** — "How many objects were on screen while the <shape> flashed?": a count inside the
  brief event's window.

Each question carries its evidence span (the frames that hold the answer) for the relevance
scorer's frame-level training labels and the oracle-window precondition.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from paperworks.core.render.scene import COLOURS, SHAPES, Scene, SceneSpec, ScriptConfig, random_scene
from paperworks.core.seeding import derive_seed
from paperworks.video_qa.params import QTYPES, WorldParams

COUNTS = ("1", "2", "3", "4", "5", "6")
VOCAB: tuple[str, ...] = (*COLOURS, *COUNTS)   # every option is one of these words
VOCAB_INDEX = {w: i for i, w in enumerate(VOCAB)}
N_OPTIONS = 4
SPLITS = ("train", "dev", "test")
TEMPLATES = {
    "global": "What colour was the {shape} for most of the video?",
    "local": "What colour did the {shape} flash?",
    "temporal": "What colour was the {shape} before it changed colour?",
    "counting": "How many objects were on screen while the {shape} flashed?",
}
N_PAIRS = len(SHAPES) * len(COLOURS)  # (shape, colour) pairs: the encoder's per-frame binding targets
MAX_COUNT = 6                         # count classes 0..6
# random_scene draws each event's kind uniformly from this list, so repeats weight the kinds:
# colour changes and flashes (what the questions ask about) twice as often as the others.
EVENT_KINDS_WEIGHTED = ("enter", "leave", "move", "cross_door", "change_colour", "change_colour", "flash", "flash")

VIDEO_SCHEMA = pa.schema([("split", pa.string()), ("video", pa.string()), ("seed", pa.int64()), ("spec", pa.string())])
QUESTION_SCHEMA = pa.schema([
    ("split", pa.string()), ("video", pa.string()), ("qid", pa.string()), ("qtype", pa.string()), ("shape", pa.string()),
    ("text", pa.string()), *[(f"option_{k}", pa.string()) for k in range(N_OPTIONS)], ("answer", pa.int64()),
    ("ev_start", pa.int64()), ("ev_end", pa.int64()),
])


def make_video(seed: int, wp: WorldParams) -> SceneSpec:
    """One scripted video; shapes re-drawn without repeats so each shape names one object."""
    cfg = ScriptConfig(n_frames=wp.n_frames, fps=wp.fps, cols=2, rows=1, n_visible=tuple(wp.n_visible), n_hidden=1,
                       n_events=wp.n_events, event_frames=tuple(wp.event_frames), sizes=tuple(wp.sizes),
                       kinds=EVENT_KINDS_WEIGHTED)
    spec = random_scene(seed, cfg)
    shapes = np.random.default_rng([seed, 1]).permutation(len(SHAPES))[: len(spec.objects)]
    raw = spec.model_dump()
    for o, s in zip(raw["objects"], shapes):
        o["shape"] = SHAPES[int(s)]
    return SceneSpec.model_validate(raw)


@dataclass(frozen=True)
class Question:
    video: str
    qid: str
    qtype: str
    shape: str
    text: str
    options: tuple[str, ...]
    answer: int          # index into options
    ev_start: int        # evidence span [ev_start, ev_end) in frames
    ev_end: int

    @property
    def option_ids(self) -> list[int]:
        return [VOCAB_INDEX[o] for o in self.options]


def object_tracks(scene: Scene) -> tuple[np.ndarray, np.ndarray]:
    """Per frame and object: visible (bool ``T × K``) and colour index (``T × K``), replayed from the script."""
    spec = scene.spec
    n, k = spec.n_frames, len(spec.objects)
    visible = np.zeros((n, k), dtype=bool)
    colour = np.zeros((n, k), dtype=np.int64)
    cidx = {c: i for i, c in enumerate(COLOURS)}
    for o in range(k):
        for t in range(n):
            st, _ = scene.state(o, t)
            visible[t, o], colour[t, o] = st.visible, cidx[st.colour]
    return visible, colour


def _colour_options(rng: np.random.Generator, answer: str, trap: str) -> tuple[tuple[str, ...], int]:
    """The answer, one trap (the colour a shortcut would give) and two other colours, shuffled."""
    others = [c for c in COLOURS if c not in (answer, trap)]
    opts = [answer, trap, *rng.choice(others, size=N_OPTIONS - 2, replace=False).tolist()]
    order = rng.permutation(N_OPTIONS)
    opts = [opts[i] for i in order]
    return tuple(opts), int(np.where(order == 0)[0][0])


def candidate_questions(scene: Scene, video: str, rng: np.random.Generator) -> dict[str, list[Question]]:
    """Every question each template allows on this video, with its truth and evidence span."""
    spec = scene.spec
    n = spec.n_frames
    visible, colour = object_tracks(scene)
    records = scene.event_records()
    out: dict[str, list[Question]] = {t: [] for t in QTYPES}

    def q(qtype: str, obj: int, opts: tuple[str, ...], ans: int, span: tuple[int, int]) -> Question:
        shape = spec.objects[obj].shape
        return Question(video, "", qtype, shape, TEMPLATES[qtype].format(shape=shape), opts, ans, int(span[0]), int(span[1]))

    changes = [r for r in records if r["kind"] == "change_colour"]
    n_changes = {o: sum(r["obj"] == o for r in changes) for o in range(len(spec.objects))}
    for r in changes:
        if n_changes[r["obj"]] != 1:
            continue  # "before it changed colour" must name one change
        before, after = r["colour_before"], r["colour_after"]
        opts, ans = _colour_options(rng, before, after)
        out["temporal"].append(q("temporal", r["obj"], opts, ans, (max(0, r["start"] - 3), min(n, r["start"] + 3))))
    for o in sorted({r["obj"] for r in changes}):
        # global: the colour it wore in most of its visible frames, clearly ahead of the runner-up
        shown = visible[:, o]
        counts = np.bincount(colour[shown, o], minlength=len(COLOURS))
        top2 = np.argsort(-counts, kind="stable")[:2]
        first, second = counts[top2[0]], counts[top2[1]]
        if second >= 0.15 * shown.sum() and first >= 1.25 * second:
            opts, ans = _colour_options(rng, COLOURS[top2[0]], COLOURS[top2[1]])
            out["global"].append(q("global", o, opts, ans, (0, n)))
    for r in records:
        if r["kind"] != "flash":
            continue
        opts, ans = _colour_options(rng, r["colour_during"], r["colour_before"])
        out["local"].append(q("local", r["obj"], opts, ans, (r["start"], r["end"])))
        on_screen = visible[r["start"]: r["end"]].sum(axis=1)
        if on_screen.min() != on_screen.max():
            continue  # the count must not change during the flash
        count = int(on_screen[0])
        lo = int(np.clip(count - rng.integers(0, N_OPTIONS), 1, len(COUNTS) - N_OPTIONS + 1))
        opts = tuple(str(c) for c in range(lo, lo + N_OPTIONS))
        out["counting"].append(q("counting", r["obj"], opts, opts.index(str(count)), (r["start"], r["end"])))
    return out


def draw_questions(cands: dict[str, list[Question]], wp: WorldParams, rng: np.random.Generator) -> list[Question]:
    """Up to ``questions_per_video`` questions, types drawn by ``mix`` among the types this video allows."""
    pools = {t: list(v) for t, v in cands.items()}
    chosen: list[Question] = []
    for _ in range(wp.questions_per_video):
        types = [t for t in QTYPES if pools[t] and wp.mix[t] > 0]
        if not types:
            break
        w = np.array([wp.mix[t] for t in types])
        t = types[int(rng.choice(len(types), p=w / w.sum()))]
        chosen.append(pools[t].pop(int(rng.integers(len(pools[t])))))
    return chosen


def build_world(wp: WorldParams, global_seed: int) -> tuple[list[dict], list[Question]]:
    """Videos (split, id, seed, spec JSON) and their questions, for the train/dev/test splits (split by video)."""
    videos, questions = [], []
    counts = {"train": wp.n_train_videos, "dev": wp.n_dev_videos, "test": wp.n_test_videos}
    for split in SPLITS:
        for i in range(counts[split]):
            seed = derive_seed(global_seed, "video_qa", "video", split, i) % 10**8  # SceneSpec caps ints at 10**8
            vid = f"{split}-{i:04d}"
            spec = make_video(seed, wp)
            rng = np.random.default_rng(derive_seed(global_seed, "video_qa", "questions", vid))
            cands = candidate_questions(Scene(spec, wp.size, wp.size), vid, rng)
            if split == "train" and wp.train_all_candidates:  # more training questions, same videos
                chosen = [qq for t in QTYPES for qq in cands[t]]
            else:
                chosen = draw_questions(cands, wp, rng)
            for j, qq in enumerate(chosen):
                questions.append(Question(**{**qq.__dict__, "qid": f"{vid}-q{j}"}))
            videos.append({"split": split, "video": vid, "seed": seed, "spec": spec.model_dump_json()})
    return videos, questions


def questions_frame(questions: list[Question], split_of: dict[str, str]):
    import pandas as pd

    rows = []
    for q in questions:
        row = {"split": split_of[q.video], "video": q.video, "qid": q.qid, "qtype": q.qtype, "shape": q.shape, "text": q.text,
               "answer": q.answer, "ev_start": q.ev_start, "ev_end": q.ev_end}
        row.update({f"option_{k}": o for k, o in enumerate(q.options)})
        rows.append(row)
    return pd.DataFrame(rows, columns=QUESTION_SCHEMA.names)


def questions_from_frame(df) -> list[Question]:
    return [Question(r.video, r.qid, r.qtype, r.shape, r.text, tuple(getattr(r, f"option_{k}") for k in range(N_OPTIONS)),
                     int(r.answer), int(r.ev_start), int(r.ev_end)) for r in df.itertuples(index=False)]


def frame_targets(scene: Scene, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames with their truth: images (``N × H × W × 3``), (shape, colour) pairs on screen (``N × 50``), object count."""
    h = scene.height
    imgs = np.empty((len(ts), h, scene.width, 3), dtype=np.uint8)
    pairs = np.zeros((len(ts), N_PAIRS), dtype=np.float32)
    count = np.zeros(len(ts), dtype=np.int64)
    sidx = {s: i for i, s in enumerate(SHAPES)}
    cidx = {c: i for i, c in enumerate(COLOURS)}
    for j, t in enumerate(ts):
        img, _, truth = scene.render(int(t))
        imgs[j] = img
        shown = truth.visible()
        for o in shown:
            pairs[j, sidx[o.shape] * len(COLOURS) + cidx[o.colour]] = 1.0
        count[j] = min(len(shown), MAX_COUNT)
    return imgs, pairs, count
