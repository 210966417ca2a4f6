"""The frame cache and the checkpoints fail loudly: a corrupt, missing or foreign entry is an ArtifactError."""
import json

import pytest
import torch

from paperworks.core.io import ArtifactError
from paperworks.core.render.scene import Scene
from paperworks.core.vision import encode_batched, frames_to_tensor
from paperworks.video_qa.artifacts import encode_videos, load_frame_table, load_model, save_model
from paperworks.video_qa.models import FEATURE_DIM, Answerer, make_featurizer
from paperworks.video_qa.params import AnswererParams, EncoderParams, WorldParams
from paperworks.video_qa.world import make_video

WP = WorldParams(n_train_videos=2, n_dev_videos=2, n_test_videos=2, n_frames=120, n_events=6)


@pytest.fixture()
def cache(tmp_path):
    torch.manual_seed(0)
    encoder = make_featurizer(EncoderParams(pretrain_frames=64, steps=10))
    specs = {"v0": make_video(1, WP), "v1": make_video(2, WP)}
    index = encode_videos(encoder, specs, 32, tmp_path)
    return tmp_path, encoder, specs, index


def test_cache_round_trip(cache):
    root, encoder, specs, _ = cache
    table, rows = load_frame_table(["v1", "v0"], root)
    assert table.shape == (2, 120, FEATURE_DIM) and table.dtype == torch.float16 and rows == {"v1": 0, "v0": 1}
    direct = encode_batched(encoder, Scene(specs["v1"], 32, 32).frames(range(120)), prepare=frames_to_tensor)
    torch.testing.assert_close(table[0].float(), direct.half().float())


def test_flipped_byte_is_an_artifact_error(cache):
    root, _, _, index = cache
    path = next((root / "cache").rglob(f"{index['v1']}.safetensors"))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # inside the embeddings: the checksum no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="corrupt cache entry"):
        load_frame_table(["v0", "v1"], root)


def test_truncated_missing_and_swapped_entries(cache):
    root, _, _, index = cache
    p1 = next((root / "cache").rglob(f"{index['v1']}.safetensors"))
    p0 = next((root / "cache").rglob(f"{index['v0']}.safetensors"))
    p1.write_bytes(p1.read_bytes()[:40])
    with pytest.raises(ArtifactError, match=str(p1.name)):
        load_frame_table(["v1"], root)
    p1.write_bytes(p0.read_bytes())  # another video's frames under v1's key
    with pytest.raises(ArtifactError, match="belongs to key"):
        load_frame_table(["v1"], root)
    p1.unlink()
    with pytest.raises(ArtifactError, match="cached frames of video v1 are missing"):
        load_frame_table(["v1"], root)
    with pytest.raises(ArtifactError, match="video v9 is not in the frame cache"):
        load_frame_table(["v9"], root)
    (root / "index.json").write_text(json.dumps({"size": 32}))
    with pytest.raises(ArtifactError, match="not a frame-cache index"):
        load_frame_table(["v0"], root)


def test_checkpoint_must_fit_the_model(tmp_path):
    ap = AnswererParams(steps=10)
    save_model(tmp_path / "a.safetensors", Answerer(FEATURE_DIM, ap))
    load_model(tmp_path / "a.safetensors", Answerer(FEATURE_DIM, ap))
    with pytest.raises(ArtifactError, match="does not fit the model"):
        load_model(tmp_path / "a.safetensors", Answerer(FEATURE_DIM, ap.model_copy(update={"hidden": 8})))
    with pytest.raises(ArtifactError, match="missing"):
        load_model(tmp_path / "absent.safetensors", Answerer(FEATURE_DIM, ap))
