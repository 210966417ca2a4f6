"""Paths and (safe) loading of the track's artifacts: safetensors, JSON, Parquet — never pickle."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from paperworks.core.io import ArtifactError, load_safetensors, read_json, save_safetensors
from paperworks.encoder_fusion.world import Case

WORLD = Path("data/encoder_fusion/world")
MODELS = Path("models/encoder_fusion")
FEATURES = Path("data/encoder_fusion/features")
VQA = Path("data/encoder_fusion/vqa")
PANEL = Path("data/encoder_fusion/panel")
PLOTS = Path("plots/encoder_fusion")
METRICS = Path("metrics/encoder_fusion.json")


def save_model(path: Path, model: nn.Module) -> None:
    save_safetensors(path, {k: v.detach().contiguous() for k, v in model.state_dict().items()})


def load_model(path: Path, model: nn.Module) -> nn.Module:
    """Weights into ``model``; missing, extra or mis-shaped tensors are an ``ArtifactError``."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tensors = load_safetensors(path, expected)
    if set(tensors) != set(expected):
        raise ArtifactError(f"{path}: tensors {sorted(set(tensors) ^ set(expected))[:4]} do not match the model")
    model.load_state_dict(tensors)
    return model.eval()


def read_world(root: Path = WORLD) -> tuple[list[Case], np.ndarray, np.ndarray]:
    """(cases, images N×S×S×3 uint8, dense labels N×g×g); a case count that disagrees with the arrays is an error."""
    records = read_json(root / "cases.json")
    arrays = load_safetensors(root / "images.safetensors")
    if set(arrays) != {"images", "dense"}:
        raise ArtifactError(f"{root / 'images.safetensors'}: expected tensors images, dense (got {sorted(arrays)})")
    images, dense = arrays["images"].numpy(), arrays["dense"].numpy()
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ArtifactError(f"{root / 'images.safetensors'}: images must be uint8 N×S×S×3 (got {images.dtype} {images.shape})")
    if not len(records) == len(images) == len(dense):
        raise ArtifactError(f"{root}: {len(records)} cases but {len(images)} images and {len(dense)} label maps")
    return [Case.from_record(r) for r in records], images, dense


def read_tokens(root: Path = FEATURES) -> dict[str, torch.Tensor]:
    t = load_safetensors(root / "tokens.safetensors")
    need = {"foundation", "xray", "path", "question_embeddings"}
    if set(t) != need:
        raise ArtifactError(f"{root / 'tokens.safetensors'}: expected tensors {sorted(need)} (got {sorted(t)})")
    bad = [k for k, v in t.items() if not torch.isfinite(v).all()]
    if bad:
        raise ArtifactError(f"{root / 'tokens.safetensors'}: non-finite values in {bad}")
    return {k: v.float() for k, v in t.items()}

VOLUMES = Path("data/encoder_fusion/volumes")
VOLUME_VQA = Path("data/encoder_fusion/volume_vqa")
DECODER = Path("data/encoder_fusion/decoder")
EXPLORE = Path("data/encoder_fusion/explore")
RELIABILITY = Path("data/encoder_fusion/reliability")
