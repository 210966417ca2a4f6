"""Corrupted or mismatched world files fail with a clear error naming the file, before any work."""
import pytest
import torch

from paperworks.core.io import ArtifactError, save_safetensors, write_json
from paperworks.encoder_fusion.artifacts import read_world
from paperworks.encoder_fusion.params import WorldParams
from paperworks.encoder_fusion.world import build_world


def _write(root, images, dense, cases):
    save_safetensors(root / "images.safetensors", {"images": images, "dense": dense})
    write_json(root / "cases.json", [c.to_record() for c in cases])


@pytest.fixture()
def world(tmp_path):
    cases, images, dense = build_world(WorldParams(size=32, n_train=8, n_dev=4, n_test=4), 5)
    _write(tmp_path, torch.from_numpy(images), torch.from_numpy(dense), cases)
    return tmp_path, cases, images, dense


def test_round_trip(world):
    root, cases, images, dense = world
    got_cases, got_images, got_dense = read_world(root)
    assert got_cases == cases and (got_images == images).all() and (got_dense == dense).all()


def test_truncated_images_file(world):
    root = world[0]
    path = root / "images.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ArtifactError, match="images.safetensors"):
        read_world(root)


def test_wrong_dtype_and_count(world):
    root, cases, images, dense = world
    _write(root, torch.from_numpy(images).float(), torch.from_numpy(dense), cases)
    with pytest.raises(ArtifactError, match="uint8"):
        read_world(root)
    _write(root, torch.from_numpy(images), torch.from_numpy(dense), cases[:-1])
    with pytest.raises(ArtifactError, match="cases but"):
        read_world(root)


def _vqa_seed(seed, fusions):
    import pandas as pd

    from paperworks.core.io import write_parquet
    from paperworks.encoder_fusion.artifacts import VQA_PREDICTION_SCHEMA, vqa_seed_dir

    root = vqa_seed_dir(seed)
    root.mkdir(parents=True)
    rows = pd.DataFrame([{f.name: 0 for f in VQA_PREDICTION_SCHEMA} | {"fusion": f, "seed": seed, "key": f"q{i}", "case_id": "c",
                          "modality": "xray", "qtype": "presence", "region": "r", "small": False, "correct": 1.0, "pred_text": "yes"}
                         for i, f in enumerate(fusions)])
    write_parquet(root / "predictions.parquet", rows, VQA_PREDICTION_SCHEMA)
    write_json(root / "histories.json", {f"{f}-{seed}": [{"step": 0}] for f in fusions})


def test_read_vqa_gathers_the_seeds_the_params_name_and_refuses_others(tmp_path, monkeypatch):
    from paperworks.encoder_fusion.artifacts import read_vqa

    monkeypatch.chdir(tmp_path)
    fusions = ["foundation", "cascade"]
    _vqa_seed(0, fusions)
    _vqa_seed(1, fusions)
    pred, hist = read_vqa([0, 1], fusions)
    assert sorted(pred["seed"].unique()) == [0, 1] and set(hist) == {"foundation-0", "cascade-0", "foundation-1", "cascade-1"}
    with pytest.raises(ArtifactError, match="seed_2: missing.*encoder_fusion_vqa@2"):
        read_vqa([0, 1, 2], fusions)
    with pytest.raises(ArtifactError, match="seed_0: holds runs"):  # written under params with fewer fusions
        read_vqa([0, 1], ["foundation", "parallel", "cascade"])
