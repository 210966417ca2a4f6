"""An on-disk embedding cache keyed by a content hash.

A key is the SHA-256 of everything the embedding depends on — the encoder's weights, the
input pixels (or texts), any settings — via :func:`content_hash`, so a changed input or
encoder simply misses. Each entry is one safetensors file written atomically through
:mod:`paperworks.core.io`, with its key and a SHA-256 of the tensor bytes in the metadata;
reading checks both, so a truncated, bit-flipped or swapped file raises
:class:`~paperworks.core.io.ArtifactError` naming the file instead of feeding garbage on.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from paperworks.core.io import ArtifactError, load_safetensors, safetensors_metadata, save_safetensors

TENSOR_NAME = "embeddings"


def _feed(h, part: object) -> None:
    # Every part is tagged with its type (and arrays with dtype and shape) so different
    # values never serialise to the same bytes.
    if isinstance(part, torch.Tensor):
        part = part.detach().cpu().contiguous().numpy()
    if isinstance(part, np.ndarray):
        a = np.ascontiguousarray(part)
        h.update(f"nd:{a.dtype.str}:{a.shape}:".encode())
        h.update(a.tobytes())
    elif isinstance(part, nn.Module):
        h.update(f"module:{type(part).__name__}:".encode())
        for name, value in sorted(part.state_dict().items()):
            h.update(f"{name}:".encode())
            _feed(h, value)
    elif isinstance(part, bytes):
        h.update(b"bytes:%d:" % len(part) + part)
    elif isinstance(part, str):
        data = part.encode()
        h.update(b"str:%d:" % len(data) + data)
    elif isinstance(part, (bool, int, float)) or part is None:
        h.update(f"{type(part).__name__}:{part!r};".encode())
    elif isinstance(part, (list, tuple)):
        h.update(f"seq:{len(part)}:".encode())
        for p in part:
            _feed(h, p)
    else:
        raise TypeError(f"content_hash cannot hash a {type(part).__name__}")


def content_hash(*parts: object) -> str:
    """Hex SHA-256 over arrays, tensors, modules (their weights), strings, bytes, numbers and sequences of them."""
    h = hashlib.sha256()
    for part in parts:
        _feed(h, part)
    return h.hexdigest()


def _tensor_digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


class EmbeddingCache:
    """``root/<key[:2]>/<key>.safetensors``, one tensor per key, stored as ``dtype`` (float16 by default)."""

    def __init__(self, root: Path | str, dtype: torch.dtype = torch.float16) -> None:
        self.root = Path(root)
        self.dtype = dtype

    def path(self, key: str) -> Path:
        if len(key) < 8 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"cache key must be a hex digest (got {key!r})")
        return self.root / key[:2] / f"{key}.safetensors"

    def __contains__(self, key: str) -> bool:
        return self.path(key).exists()

    def put(self, key: str, embeddings: torch.Tensor) -> Path:
        t = torch.as_tensor(embeddings).detach().cpu().to(self.dtype).contiguous()
        path = self.path(key)
        save_safetensors(path, {TENSOR_NAME: t}, metadata={"key": key, "sha256": _tensor_digest(t)})
        return path

    def get(self, key: str) -> torch.Tensor | None:
        """The cached tensor, ``None`` when absent; :class:`ArtifactError` when the file is corrupt."""
        path = self.path(key)
        if not path.exists():
            return None
        tensors = load_safetensors(path)  # unreadable header / truncation → ArtifactError
        meta = safetensors_metadata(path)
        if set(tensors) != {TENSOR_NAME}:
            raise ArtifactError(f"{path}: corrupt cache entry (tensors {sorted(tensors)}, expected ['{TENSOR_NAME}'])")
        if meta.get("key") != key:
            raise ArtifactError(f"{path}: cache entry belongs to key {meta.get('key')!r}, not {key!r}")
        t = tensors[TENSOR_NAME]
        if meta.get("sha256") != _tensor_digest(t):
            raise ArtifactError(f"{path}: corrupt cache entry (checksum of the embeddings does not match)")
        return t

    def get_or_compute(self, key: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Cached value for ``key``, or ``compute()`` stored then returned (as the cache's dtype, like a hit)."""
        hit = self.get(key)
        if hit is not None:
            return hit
        self.put(key, compute())
        return self.get(key)


@torch.no_grad()
def encode_batched(encoder: nn.Module, inputs: np.ndarray | torch.Tensor, batch_size: int = 256,
                   prepare: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Run ``encoder`` in eval mode over ``inputs`` in batches; float32 ``N × embed_dim``.

    ``prepare`` (e.g. ``frames_to_tensor``) converts one batch at a time, so uint8 frames are
    never all held as float (141k 64 × 64 frames would be 7 GB as float32).
    """
    was_training = encoder.training
    encoder.eval()
    inputs = torch.as_tensor(inputs)
    try:
        outs = []
        for i in range(0, len(inputs), batch_size):
            batch = inputs[i: i + batch_size]
            outs.append(encoder(prepare(batch) if prepare is not None else batch))
    finally:
        encoder.train(was_training)
    return torch.cat(outs) if outs else torch.empty(0, getattr(encoder, "embed_dim", 0))
