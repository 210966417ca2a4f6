"""Small vision pieces shared by the vision-language tracks (video QA, evaluation agent, encoder fusion).

- :mod:`.encoders` — ``PatchifyEncoder2D`` / ``PatchifyEncoder3D`` (4 × 4 stride-4 stem, ≈ 20× faster
  to train than a full-resolution conv stack at 64 × 64), the ``PlainConvEncoder2D`` baseline,
  ``frames_to_tensor`` / ``volumes_to_tensor``.
- :mod:`.cache` — ``EmbeddingCache`` (safetensors keyed by ``content_hash``; corruption → ``ArtifactError``),
  ``encode_batched``.
- :mod:`.contrastive` — ``ImageTextModel``, ``contrastive_loss`` (CLIP InfoNCE with shared captions),
  ``train_contrastive``, ``retrieval_accuracy``.
- :mod:`.text` — frozen MiniLM-L6 sentence embeddings (offline), cached (imports sentence-transformers lazily).
"""
from paperworks.core.vision.cache import EmbeddingCache, content_hash, encode_batched
from paperworks.core.vision.contrastive import (
    ContrastiveConfig,
    ImageTextModel,
    contrastive_loss,
    retrieval_accuracy,
    train_contrastive,
)
from paperworks.core.vision.encoders import (
    EncoderConfig,
    PatchifyEncoder2D,
    PatchifyEncoder3D,
    PlainConvEncoder2D,
    count_parameters,
    frames_to_tensor,
    volumes_to_tensor,
)
from paperworks.core.vision.text import MINILM_DIM, cached_text_embeddings, encode_texts

__all__ = [
    "MINILM_DIM", "ContrastiveConfig", "EmbeddingCache", "EncoderConfig", "ImageTextModel", "PatchifyEncoder2D",
    "PatchifyEncoder3D", "PlainConvEncoder2D", "cached_text_embeddings", "content_hash", "contrastive_loss",
    "count_parameters", "encode_batched", "encode_texts", "frames_to_tensor", "retrieval_accuracy",
    "train_contrastive", "volumes_to_tensor",
]
