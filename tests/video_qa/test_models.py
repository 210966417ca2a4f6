"""The answerer and the relevance scorer on hand-made probe tracks: what the option features read, that
every shape and colour is scored by the same weights, and that the answerer learns the flash rule."""
import numpy as np
import pytest
import torch

from paperworks.core.render.scene import COLOURS, SHAPES
from paperworks.video_qa.models import (
    COLOUR_FEATURES,
    FEATURE_DIM,
    OPTION_FEATURES,
    Answerer,
    RelevanceScorer,
    option_features,
    train_answerer,
    uniform_indices,
    window_indices,
)
from paperworks.video_qa.params import AnswererParams, ScorerParams
from paperworks.video_qa.world import VOCAB_INDEX, Question

ABSENT = len(COLOURS)
FEAT = {name: i for i, name in enumerate(OPTION_FEATURES)}


def blank(n_frames: int) -> torch.Tensor:
    """``n_frames`` cached frames in which every shape is absent and no object is counted."""
    emb = torch.zeros(n_frames, FEATURE_DIM)
    for s in range(len(SHAPES)):
        emb[:, s * (ABSENT + 1) + ABSENT] = 1.0
    emb[:, len(SHAPES) * (ABSENT + 1)] = 1.0
    return emb


def paint(emb: torch.Tensor, frames, shape: str, colour: str | None = None, count: int | None = None) -> None:
    """Set the probe probabilities of ``frames``: ``shape`` wears ``colour`` (one-hot), and/or the count."""
    frames = list(frames)
    if colour is not None:
        s = SHAPES.index(shape) * (ABSENT + 1)
        emb[frames, s: s + ABSENT + 1] = 0.0
        emb[frames, s + COLOURS.index(colour)] = 1.0
    if count is not None:
        c = len(SHAPES) * (ABSENT + 1)
        emb[frames, c:] = 0.0
        emb[frames, c + count] = 1.0


def ids(words) -> torch.Tensor:
    return torch.tensor([[VOCAB_INDEX[w] for w in words]])


def clip_with_a_flash() -> torch.Tensor:
    """20 frames: the square is c0 then c1 (a change at frame 8) and flashes c2 in frames 4–5; the count is
    4 except 2 during the flash; the circle wears c2 throughout (a wrong shape would read it)."""
    c0, c1, c2 = COLOURS[:3]
    emb = blank(20)
    paint(emb, range(0, 8), "square", c0)
    paint(emb, range(8, 20), "square", c1)
    paint(emb, [4, 5], "square", c2)
    paint(emb, range(20), "circle", c2, count=4)
    paint(emb, [4, 5], "circle", count=2)
    return emb[None]


def test_option_features_read_the_queried_shape():
    emb, times = clip_with_a_flash(), torch.linspace(0.2, 0.6, 20)[None]
    square = torch.tensor([SHAPES.index("square")])
    colours = option_features(emb, times, square, ids(COLOURS[:4]), torch.tensor(20.0))[0]
    share, peak_above = colours[:, FEAT["share"]], colours[:, FEAT["peak_above_mean"]]
    np.testing.assert_allclose(share.numpy(), [6 / 20, 12 / 20, 2 / 20, 0.0], atol=2e-3)   # mean P(c) / mean P(visible)
    assert int(share.argmax()) == 1                 # worn longest: the colour after the change
    assert int(peak_above.argmax()) == 2            # the flash rises most above its clip mean
    order = colours[:, FEAT["early_minus_late"]]
    assert order[0] > 0.3 and order[1] < -0.3       # c0 before the change, c1 after
    assert colours[:, len(COLOUR_FEATURES):].abs().sum() == 0   # count features are 0 on colour options

    counts = option_features(emb, times, square, ids(["1", "2", "3", "4"]), torch.tensor(20.0))[0]
    in_flash, clip_mean = counts[:, FEAT["in_unusual_frames"]], counts[:, FEAT["clip_mean"]]
    assert int(in_flash.argmax()) == 1 and in_flash[1] > 0.9   # "2": the count in the frames where the square flashed
    np.testing.assert_allclose(clip_mean.numpy(), [0.0, 0.1, 0.0, 0.9], atol=1e-6)
    assert counts[:, :len(COLOUR_FEATURES)].abs().sum() == 0


def test_answerer_scores_every_shape_and_colour_with_the_same_weights():
    torch.manual_seed(0)
    model = Answerer(FEATURE_DIM, AnswererParams(steps=10)).eval()
    with torch.no_grad():
        model.b1.normal_()
        model.linear.normal_()
    emb = torch.rand(2, 12, FEATURE_DIM)
    times = torch.sort(torch.rand(2, 12), dim=1).values
    qtype, shape = torch.tensor([1, 2]), torch.tensor([1, 3])
    options = torch.tensor([[0, 3, 5, 9], [2, 4, 6, 8]])
    logits = model(emb, times, qtype, shape, options)
    # relabel the colours by a permutation (in every shape's block and in the options): same logits
    perm = torch.randperm(len(COLOURS), generator=torch.Generator().manual_seed(1))
    recoloured = emb.clone()
    for s in range(len(SHAPES)):
        block = slice(s * (ABSENT + 1), s * (ABSENT + 1) + ABSENT)
        recoloured[..., s * (ABSENT + 1) + perm] = emb[..., block]
    torch.testing.assert_close(model(recoloured, times, qtype, shape, perm[options]), logits)
    # move the queried shapes' blocks to other shapes and ask about those: same logits
    swapped = emb.clone()
    for a, b in ((1, 4), (3, 0)):
        sa, sb = slice(a * (ABSENT + 1), (a + 1) * (ABSENT + 1)), slice(b * (ABSENT + 1), (b + 1) * (ABSENT + 1))
        swapped[..., sa], swapped[..., sb] = emb[..., sb], emb[..., sa]
    torch.testing.assert_close(model(swapped, times, qtype, torch.tensor([4, 0]), options), logits)
    with pytest.raises(ValueError, match="62 per frame"):
        Answerer(32, AnswererParams(steps=10))


def flash_world(n_videos: int, n_frames: int, seed: int) -> tuple[torch.Tensor, list[Question]]:
    """Noisy probe tracks of videos where one shape keeps a base colour and flashes another for 4 frames;
    one local question each (options: the flash, the base colour, two others)."""
    rng = np.random.default_rng(seed)
    table, questions = [], []
    for v in range(n_videos):
        emb = blank(n_frames)
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        base, flash, *others = rng.choice(COLOURS, size=4, replace=False).tolist()
        start = int(rng.integers(0, n_frames - 4))
        paint(emb, range(n_frames), shape, base, count=int(rng.integers(1, 5)))
        paint(emb, range(start, start + 4), shape, flash)
        noise = torch.from_numpy(rng.dirichlet(np.ones(FEATURE_DIM), size=n_frames)).float()
        table.append(0.7 * emb + 0.3 * noise)   # not probabilities per block any more, which the features must survive
        options = [flash, base, *others]
        order = rng.permutation(4)
        questions.append(Question(f"v{v}", f"v{v}-q", "local", shape, "", tuple(options[i] for i in order),
                                  int(np.where(order == 0)[0][0]), start, start + 4))
    return torch.stack(table).half(), questions


def test_answerer_learns_the_flash_from_plain_clips():
    table, questions = flash_world(40, 120, seed=0)
    rows = {q.video: i for i, q in enumerate(questions)}
    train, held_out = questions[:28], questions[28:]
    ap = AnswererParams(steps=150, batch_size=32, lr=0.02, log_every=10)
    model, history = train_answerer(table, rows, train, ap, global_frames=12, window_frames=12, seed=0)
    assert len(history) == 16 and history[-1]["loss"] < 0.5 * history[0]["loss"]

    def accuracy(view) -> float:
        hits = []
        for q in held_out:
            idx = view(q)
            emb = table[rows[q.video], torch.from_numpy(idx)].float()[None]
            logits = model(emb, torch.from_numpy(idx / 120).float()[None], torch.tensor([1]),
                           torch.tensor([SHAPES.index(q.shape)]), torch.tensor([q.option_ids]))
            hits.append(int(logits.argmax()) == q.answer)
        return float(np.mean(hits))

    oracle = accuracy(lambda q: window_indices(120, (q.ev_start + q.ev_end) // 2, 12))
    sparse = accuracy(lambda q: uniform_indices(120, 12))   # 12 frames of 120 mostly miss a 4-frame flash
    assert oracle >= 0.9 and oracle - sparse >= 0.3


def test_scorer_reads_the_queried_shape():
    torch.manual_seed(0)
    scorer = RelevanceScorer(FEATURE_DIM, ScorerParams(steps=10)).eval()
    emb = torch.rand(2, 9, FEATURE_DIM)
    context, qtype = emb.mean(1), torch.tensor([1, 3])
    logits = scorer(emb, context, qtype, torch.tensor([2, 0]))
    swapped = emb.clone()   # the other shapes' blocks do not matter, the queried one does
    swapped[..., 11:22] = torch.rand(2, 9, 11)
    torch.testing.assert_close(scorer(swapped, swapped.mean(1), qtype, torch.tensor([2, 0])), logits)
    assert not torch.allclose(scorer(swapped, swapped.mean(1), qtype, torch.tensor([1, 0])), logits)
    single = scorer(emb[:, 4], context, qtype, torch.tensor([2, 0]))   # one frame per question
    torch.testing.assert_close(single, logits[:, 4])
    with pytest.raises(ValueError, match="62 per frame"):
        RelevanceScorer(64, ScorerParams(steps=10))


def test_encoder_curve_reads_scenes_it_never_trained_on():
    from paperworks.core.render.scene import Scene
    from paperworks.video_qa.models import _probe_loss, shape_colour_targets, pretrain_encoder
    from paperworks.video_qa.params import EncoderParams, WorldParams
    from paperworks.video_qa.world import frame_targets, make_video

    wp = WorldParams(n_train_videos=2, n_dev_videos=2, n_test_videos=2, n_frames=120, n_events=6)
    train = frame_targets(Scene(make_video(1, wp), 32, 32), np.arange(0, 120, 3))
    held = frame_targets(Scene(make_video(2, wp), 32, 32), np.arange(0, 120, 5))
    ep = EncoderParams(pretrain_frames=64, steps=10, batch_size=8, log_every=4)
    featurizer, history = pretrain_encoder(*train, ep, seed=0, heldout=held)
    assert [h["step"] for h in history] == [0, 4, 8, 9]
    with torch.no_grad():   # the last point is the final model's loss on the held-out frames, all of them
        direct, _ = _probe_loss(featurizer.model, torch.from_numpy(held[0]), torch.from_numpy(shape_colour_targets(held[1])),
                                torch.from_numpy(held[2]))
    assert history[-1]["heldout_loss"] == pytest.approx(float(direct), rel=1e-4)
    assert all(0.0 <= h["heldout_colour_accuracy"] <= 1.0 for h in history)
