"""Corrupt or wrong-shape artifacts fail with ArtifactError naming the file."""
import pytest
import torch

from paperworks.core.io import ArtifactError, save_safetensors
from paperworks.person_search import artifacts


@pytest.fixture()
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_images_wrong_shape_or_dtype(in_tmp):
    save_safetensors(artifacts.CORPUS / "gallery_images.safetensors", {"images": torch.zeros(5, 64, 48, 3, dtype=torch.uint8)})
    assert artifacts.read_images("gallery", 5, 64, 48).shape == (5, 64, 48, 3)
    with pytest.raises(ArtifactError, match="expected"):
        artifacts.read_images("gallery", 6, 64, 48)
    save_safetensors(artifacts.CORPUS / "gallery_images.safetensors", {"images": torch.zeros(5, 64, 48, 3)})
    with pytest.raises(ArtifactError, match="uint8"):
        artifacts.read_images("gallery", 5, 64, 48)


def test_corrupt_file_and_missing_file(in_tmp):
    path = artifacts.TEXT / "embeddings.safetensors"
    with pytest.raises(ArtifactError, match="missing"):
        artifacts.read_text_views(3, 2)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a safetensors file")
    with pytest.raises(ArtifactError, match="corrupt"):
        artifacts.read_text_views(3, 2)


def test_text_views_shape_and_range_checks(in_tmp):
    emb = torch.zeros(4, 384)
    ok = {"embeddings": emb, "train_views": torch.zeros(3, 6, dtype=torch.int64), "query_views": torch.zeros(2, 6, dtype=torch.int64)}
    save_safetensors(artifacts.TEXT / "embeddings.safetensors", ok)
    assert artifacts.read_text_views(3, 2)["embeddings"].shape == (4, 384)
    with pytest.raises(ArtifactError, match="train_views"):
        artifacts.read_text_views(4, 2)
    bad = dict(ok, query_views=torch.full((2, 6), 9, dtype=torch.int64))
    save_safetensors(artifacts.TEXT / "embeddings.safetensors", bad)
    with pytest.raises(ArtifactError, match="outside"):
        artifacts.read_text_views(3, 2)
