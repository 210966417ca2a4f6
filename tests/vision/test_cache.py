"""Embedding cache: content keys, round trip, and corruption → ArtifactError."""
import numpy as np
import pytest
import torch

from paperworks.core.io import ArtifactError
from paperworks.core.vision import EmbeddingCache, PatchifyEncoder2D, content_hash, encode_batched, frames_to_tensor


def test_content_hash_is_stable_and_sensitive():
    frames = np.zeros((4, 8, 8, 3), dtype=np.uint8)
    key = content_hash("encoder-v1", frames, 64)
    assert key == content_hash("encoder-v1", frames.copy(), 64) and len(key) == 64
    changed = frames.copy()
    changed[3, 7, 7, 2] = 1
    assert content_hash("encoder-v1", changed, 64) != key
    assert content_hash("encoder-v1", frames.reshape(2, 16, 8, 3), 64) != key  # same bytes, other shape
    assert content_hash("encoder-v1", frames.astype(np.int8), 64) != key       # same bytes, other dtype
    assert content_hash("encoder-v1", frames, 65) != key
    assert content_hash("ab", "c") != content_hash("a", "bc") and content_hash("a") != content_hash(b"a")
    torch.manual_seed(0)
    a = PatchifyEncoder2D()
    b = PatchifyEncoder2D()
    b.load_state_dict(a.state_dict())
    assert content_hash(a) == content_hash(b)
    with torch.no_grad():
        b.head.bias[0] += 1e-3
    assert content_hash(a) != content_hash(b)
    with pytest.raises(TypeError, match="cannot hash"):
        content_hash({"a": 1})


def test_round_trip_and_get_or_compute(tmp_path):
    cache = EmbeddingCache(tmp_path / "emb")
    emb = torch.randn(10, 64)
    key = content_hash("round", 1)
    assert cache.get(key) is None and key not in cache
    cache.put(key, emb)
    got = cache.get(key)
    assert got.dtype == torch.float16 and torch.equal(got, emb.half())
    calls = []

    def compute():
        calls.append(1)
        return torch.ones(3, 4)

    other = content_hash("round", 2)
    first = cache.get_or_compute(other, compute)
    again = cache.get_or_compute(other, compute)
    assert len(calls) == 1 and torch.equal(first, again) and first.dtype == torch.float16
    assert not list(tmp_path.rglob(".*tmp-*"))  # atomic: no temporaries left behind
    exact = EmbeddingCache(tmp_path / "f32", dtype=torch.float32)
    exact.put(key, emb)
    assert torch.equal(exact.get(key), emb)
    with pytest.raises(ValueError, match="hex digest"):
        cache.path("../escape")


def _entry(tmp_path):
    cache = EmbeddingCache(tmp_path)
    key = content_hash("corrupt")
    cache.put(key, torch.randn(32, 64))
    return cache, key, cache.path(key)


def test_flipped_data_byte_is_detected(tmp_path):
    cache, key, path = _entry(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0x01  # inside the tensor data: safetensors itself would load this happily
    path.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match="checksum"):
        cache.get(key)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_broken_files_are_detected(tmp_path, damage):
    cache, key, path = _entry(tmp_path)
    raw = path.read_bytes()
    path.write_bytes({"truncate": raw[: len(raw) // 2], "garbage": b"\x00\x01not a tensor file" * 8, "empty": b""}[damage])
    with pytest.raises(ArtifactError, match=str(path.name)):
        cache.get(key)


def test_entry_under_the_wrong_key_is_detected(tmp_path):
    cache, key, path = _entry(tmp_path)
    other = content_hash("another")
    cache.path(other).parent.mkdir(parents=True, exist_ok=True)
    cache.path(other).write_bytes(path.read_bytes())
    with pytest.raises(ArtifactError, match="belongs to key"):
        cache.get(other)


def test_encode_batched_matches_one_pass_and_keeps_mode():
    torch.manual_seed(0)
    enc = PatchifyEncoder2D()
    enc.train()
    x = torch.rand(10, 3, 32, 32)
    out = encode_batched(enc, x, batch_size=3)
    assert enc.training and out.shape == (10, 64)
    with torch.no_grad():
        assert torch.allclose(out, enc.eval()(x), atol=1e-6)
    frames = np.random.default_rng(0).integers(0, 256, size=(7, 32, 32, 3), dtype=np.uint8)
    lazy = encode_batched(enc, frames, batch_size=4, prepare=frames_to_tensor)
    with torch.no_grad():
        assert torch.allclose(lazy, enc(frames_to_tensor(frames)), atol=1e-6)
