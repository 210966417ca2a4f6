"""Patchify encoders (2D, 3D), the plain baseline and the uint8 → tensor helpers."""
import numpy as np
import pytest
import torch

from paperworks.core.vision import (
    EncoderConfig, PatchifyEncoder2D, PatchifyEncoder3D, PlainConvEncoder2D, count_parameters, frames_to_tensor,
    volumes_to_tensor,
)


def test_2d_shapes():
    torch.manual_seed(0)
    enc = PatchifyEncoder2D()
    x = torch.rand(5, 3, 64, 64)
    assert enc(x).shape == (5, 64)
    assert enc.forward_features(x).shape == (5, 64, 4, 4)  # 64 / 4 = 16 → 8 → 4
    fine = PatchifyEncoder2D(EncoderConfig(strides=(1, 2)))
    assert fine.forward_features(x).shape == (5, 64, 8, 8) and fine(x).shape == (5, 64)
    assert enc(torch.rand(2, 3, 32, 32)).shape == (2, 64)
    small = PatchifyEncoder2D(EncoderConfig(widths=(8, 16), strides=(2,), embed_dim=10))
    assert small(x).shape == (5, 10) and small.forward_features(x).shape == (5, 16, 8, 8)
    assert PlainConvEncoder2D()(x).shape == (5, 64)
    with pytest.raises(ValueError, match="not divisible by the patch"):
        enc(torch.rand(1, 3, 62, 64))
    assert 20_000 < count_parameters(enc) < 60_000


def test_3d_shapes():
    torch.manual_seed(0)
    enc = PatchifyEncoder3D()
    x = torch.rand(2, 1, 32, 64, 64)
    assert enc(x).shape == (2, 64)
    assert enc.forward_features(x).shape == (2, 64, 2, 4, 4)  # 32/4 = 8 → 4 → 2 along depth
    thin = PatchifyEncoder3D(EncoderConfig(in_channels=1, depth_patch=2, strides=(1, 1)))
    assert thin.forward_features(torch.rand(1, 1, 4, 16, 16)).shape == (1, 64, 2, 4, 4)
    with pytest.raises(ValueError, match="not divisible"):
        enc(torch.rand(1, 1, 30, 64, 64))


@pytest.mark.parametrize("make, shape, patch", [
    (lambda: PatchifyEncoder2D(), (1, 3, 32, 32), (4, 4)),
    (lambda: PatchifyEncoder3D(), (1, 1, 16, 32, 32), (4, 4, 4)),
])
def test_stem_sees_one_patch_per_cell(make, shape, patch):
    """Changing any one pixel of the second patch changes exactly that patch's stem cell (kernel = stride = patch)."""
    torch.manual_seed(0)
    enc = make()
    stem = enc.features[0]
    x = torch.rand(shape)
    for offset in range(patch[0]):
        y = x.clone()
        y[(0, 0, *(p + offset for p in patch))] += 0.5
        with torch.no_grad():
            diff = (stem(y) - stem(x)).abs().sum(dim=(0, 1))
        assert torch.nonzero(diff > 0).tolist() == [[1] * len(patch)]


def test_embeddings_do_not_depend_on_the_batch():
    torch.manual_seed(0)
    enc = PatchifyEncoder2D()  # train mode on purpose: GroupNorm normalises per sample
    x = torch.rand(6, 3, 64, 64)
    assert torch.allclose(enc(x)[2:3], enc(x[2:3]), atol=1e-6)


def test_uint8_helpers():
    frames = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    frames[0, 0, 0] = (255, 0, 0)
    x = frames_to_tensor(frames)
    assert x.shape == (2, 3, 8, 8) and x.dtype == torch.float32
    assert x[0, :, 0, 0].tolist() == [1.0, 0.0, 0.0] and float(x.max()) == 1.0
    assert frames_to_tensor(frames[0]).shape == (1, 3, 8, 8)
    with pytest.raises(TypeError, match="uint8"):
        frames_to_tensor(frames.astype(np.float32))
    vols = np.full((3, 4, 8, 8), 51, dtype=np.uint8)
    v = volumes_to_tensor(vols)
    assert v.shape == (3, 1, 4, 8, 8) and float(v[0, 0, 0, 0, 0]) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="volumes"):
        volumes_to_tensor(vols[0])


def test_config_checks():
    with pytest.raises(ValueError, match="strides"):
        EncoderConfig(widths=(16, 32, 64), strides=(2,))
    with pytest.raises(ValueError):
        EncoderConfig(patch=0)
