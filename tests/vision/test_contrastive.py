"""Contrastive image-text training against cached (here: tiny random) text embeddings."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from paperworks.core.render.scene import SHAPES, PromptItem, Scene, ScenePrompt, realise
from paperworks.core.vision import (
    ContrastiveConfig, EncoderConfig, ImageTextModel, PatchifyEncoder2D, PatchifyEncoder3D, contrastive_loss,
    retrieval_accuracy, train_contrastive, volumes_to_tensor,
)

COLOURS = ("red", "blue", "green", "yellow")
CAPTIONS = [(s, c) for s in SHAPES for c in COLOURS]  # 20 captions: chance top-1 = 0.05


def shape_dataset(n: int, seed: int, sizes=("large",)):
    """One shape per 64 × 64 image at a random place; its caption id is (shape, colour).

    Large shapes by default: with medium ones (≈ 10 px across, 2–3 stem patches) 300 steps mostly
    learn the colour (top-1 0.25–0.32 over 2 seeds, 0.38–0.40 after 800 steps, measured).
    """
    rng = np.random.default_rng(seed)
    ids = rng.integers(len(CAPTIONS), size=n)
    images = np.stack([
        Scene(realise(ScenePrompt(items=(PromptItem(shape=CAPTIONS[i][0], colour=CAPTIONS[i][1],
                                                     size=str(rng.choice(sizes))),)), seed=seed * 100_000 + k)).frame(0)
        for k, i in enumerate(ids)
    ])
    return images, ids


def random_text_table(rows: int = len(CAPTIONS), dim: int = 32) -> torch.Tensor:
    """Stand-in for cached MiniLM caption embeddings: no structure to exploit, only identity."""
    return torch.from_numpy(np.random.default_rng(123).standard_normal((rows, dim)).astype(np.float32))


def test_loss_matches_a_hand_computation_with_shared_captions():
    img = F.normalize(torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]), dim=1)
    txt = F.normalize(torch.tensor([[1.0, 0.2], [0.1, 1.0]]), dim=1)
    ids = torch.tensor([0, 0, 1])  # images 0 and 1 share caption 0
    scale = torch.tensor(5.0)
    logits = (scale * img @ txt.T).numpy()
    i2t = np.mean([-(logits[b, ids[b]] - np.log(np.exp(logits[b]).sum())) for b in range(3)])
    col = logits.T  # caption → images
    t2i_0 = -0.5 * sum(col[0, b] - np.log(np.exp(col[0]).sum()) for b in (0, 1))  # both images are positives
    t2i_1 = -(col[1, 2] - np.log(np.exp(col[1]).sum()))
    expected = (i2t + (t2i_0 + t2i_1) / 2) / 2
    assert float(contrastive_loss(img, txt, ids, scale)) == pytest.approx(expected, rel=1e-5)


def test_few_hundred_steps_learn_shape_and_colour_captions():
    images, ids = shape_dataset(1400, seed=0)
    train, test = slice(0, 1100), slice(1100, None)
    table = random_text_table()
    torch.manual_seed(0)
    model = ImageTextModel(PatchifyEncoder2D(), text_dim=table.shape[1])
    before = retrieval_accuracy(model, images[test], ids[test], table)
    history = train_contrastive(model, images[train], ids[train], table, ContrastiveConfig(steps=300, batch_size=64),
                                seed=0, eval_fn=lambda step: retrieval_accuracy(model, images[test], ids[test], table))
    after = retrieval_accuracy(model, images[test], ids[test], table)
    assert before["chance_top1"] == pytest.approx(0.05)
    assert before["image_to_text_top1"] < 0.15
    assert after["image_to_text_top1"] > 0.45  # > 9× chance; colour alone would give 0.25
    assert after["mean_rank"] < before["mean_rank"] / 2
    assert history[-1]["step"] == 299 and history[-1]["image_to_text_top1"] == after["image_to_text_top1"]
    assert history[-1]["loss"] < history[0]["loss"] - 1.0


def test_same_seed_same_weights():
    images, ids = shape_dataset(64, seed=1)
    table = random_text_table()

    def run():
        torch.manual_seed(0)
        model = ImageTextModel(PatchifyEncoder2D(EncoderConfig(widths=(8, 16), strides=(2,), embed_dim=16)), text_dim=32)
        train_contrastive(model, images, ids, table, ContrastiveConfig(steps=5, batch_size=16), seed=7)
        return b"".join(v.numpy().tobytes() for _, v in sorted(model.state_dict().items()))

    assert run() == run()


def test_volumes_train_through_the_3d_encoder():
    """Volumes with a bright slab at one of 4 depths; captions = the depth. Loss falls, retrieval beats chance."""
    rng = np.random.default_rng(0)
    ids = rng.integers(4, size=160)
    vols = rng.integers(0, 40, size=(160, 16, 16, 16), dtype=np.uint8)
    for v, d in zip(vols, ids):
        v[4 * d: 4 * d + 4, 4:12, 4:12] = 230
    table = torch.from_numpy(np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32))
    torch.manual_seed(0)
    model = ImageTextModel(PatchifyEncoder3D(EncoderConfig(in_channels=1, widths=(8, 16), strides=(1,), embed_dim=16)), 8)
    hist = train_contrastive(model, vols[:128], ids[:128], table, ContrastiveConfig(steps=60, batch_size=32, warmup_steps=5),
                             prepare=volumes_to_tensor)
    acc = retrieval_accuracy(model, vols[128:], ids[128:], table, prepare=volumes_to_tensor)
    assert hist[-1]["loss"] < hist[0]["loss"] and acc["image_to_text_top1"] > 0.6


def test_bad_inputs_fail_before_training():
    images, ids = shape_dataset(8, seed=2)
    table = random_text_table()
    model = ImageTextModel(PatchifyEncoder2D(), text_dim=32)
    cfg = ContrastiveConfig(steps=1)
    with pytest.raises(ValueError, match="text ids"):
        train_contrastive(model, images, ids[:4], table, cfg)
    with pytest.raises(ValueError, match="index the 20-row"):
        train_contrastive(model, images, ids + 20, table, cfg)
    with pytest.raises(ValueError, match="32-d"):
        train_contrastive(ImageTextModel(PatchifyEncoder2D(), text_dim=16), images, ids, table, cfg)


def test_dvclive_curves(tmp_path):
    images, ids = shape_dataset(16, seed=3)
    model = ImageTextModel(PatchifyEncoder2D(EncoderConfig(widths=(8, 16), strides=(2,), embed_dim=16)), text_dim=32)
    train_contrastive(model, images, ids, random_text_table(), ContrastiveConfig(steps=3, batch_size=8, log_every=1),
                      live_dir=tmp_path / "live")
    rows = (tmp_path / "live" / "plots" / "metrics" / "loss.tsv").read_text().strip().splitlines()
    assert rows[0].split("\t") == ["step", "loss"] and len(rows) == 4
    assert all(math.isfinite(float(r.split("\t")[1])) for r in rows[1:])
