"""Paths and (safe) loading of the track's artifacts: safetensors, JSON, Parquet — never pickle."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from torch import nn

from paperworks.core.io import ArtifactError, load_safetensors, read_json, read_parquet, save_safetensors
from paperworks.encoder_fusion.world import Case

WORLD = Path("data/encoder_fusion/world")
MODELS = Path("models/encoder_fusion")
FEATURES = Path("data/encoder_fusion/features")
VQA = Path("data/encoder_fusion/vqa")
PANEL = Path("data/encoder_fusion/panel")
PLOTS = Path("plots/encoder_fusion")
METRICS = Path("metrics/encoder_fusion.json")

VQA_PREDICTION_SCHEMA = pa.schema([("fusion", pa.string()), ("seed", pa.int64()), ("key", pa.string()), ("case_id", pa.string()),
                                   ("modality", pa.string()), ("qtype", pa.string()), ("region", pa.string()), ("small", pa.bool_()),
                                   ("answer", pa.int64()), ("pred", pa.int64()), ("correct", pa.float64()), ("pred_text", pa.string())])


def encoder_dir(seed: int) -> Path:
    """What stage ``encoder_fusion_encoders@<seed>`` trains: that seed's foundation encoder, specialists, curves."""
    return MODELS / f"seed_{seed}"


def features_dir(seed: int) -> Path:
    """That seed's frozen token grids, question embeddings and small-lesion detection probe."""
    return FEATURES / f"seed_{seed}"


def vqa_seed_dir(seed: int) -> Path:
    """What stage ``encoder_fusion_vqa@<seed>`` writes: that seed's runs of every fusion."""
    return VQA / f"seed_{seed}"


def vqa_head_path(fusion: str, seed: int) -> Path:
    return vqa_seed_dir(seed) / "heads" / f"{fusion}-{seed}.safetensors"


def read_vqa(seeds: list[int], fusions: list[str]) -> tuple[pd.DataFrame, dict]:
    """Every seed's test predictions (concatenated) and dev curves (merged, keyed ``<fusion>-<seed>``).

    A seed of the params with no folder, or a folder whose runs are not exactly that seed's fusions (another
    profile's output), is an ``ArtifactError``: the claims' clusters must be the seeds the params name."""
    preds, histories = [], {}
    for s in seeds:
        root = vqa_seed_dir(s)
        if not root.is_dir():
            raise ArtifactError(f"{root}: missing (encoder_fusion.head.seeds names seed {s}; run encoder_fusion_vqa@{s})")
        df, hist = read_parquet(root / "predictions.parquet", VQA_PREDICTION_SCHEMA), read_json(root / "histories.json")
        want = {f"{f}-{s}" for f in fusions}
        got = {f"{f}-{x}" for f, x in df[["fusion", "seed"]].drop_duplicates().itertuples(index=False)}
        if got != want or set(hist) != want:
            raise ArtifactError(f"{root}: holds runs {sorted(got | set(hist))}, expected {sorted(want)} "
                                "(written under other params: rerun encoder_fusion_vqa)")
        preds.append(df)
        histories.update(hist)
    return pd.concat(preds, ignore_index=True), histories


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


def read_tokens(root: Path) -> dict[str, torch.Tensor]:
    if not (root / "tokens.safetensors").is_file():
        raise ArtifactError(f"{root / 'tokens.safetensors'}: missing (run encoder_fusion_encoders@{root.name.removeprefix('seed_')})")
    t = load_safetensors(root / "tokens.safetensors")
    need = {"foundation", "xray", "path", "question_embeddings"}
    if set(t) != need:
        raise ArtifactError(f"{root / 'tokens.safetensors'}: expected tensors {sorted(need)} (got {sorted(t)})")
    bad = [k for k, v in t.items() if not torch.isfinite(v).all()]
    if bad:
        raise ArtifactError(f"{root / 'tokens.safetensors'}: non-finite values in {bad}")
    return {k: v.float() for k, v in t.items()}


def draw_tokens(draw: int, like: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The cached tokens of encoder draw ``draw`` (``features_dir(draw)``, written by ``encoder_fusion_encoders@<draw>``);
    with ``like``, tensors whose shapes differ from it (another draw's, written under other sizes) are an ``ArtifactError``."""
    root = features_dir(draw)
    t = read_tokens(root)
    if like is not None:
        bad = {k: (tuple(v.shape), tuple(like[k].shape)) for k, v in t.items() if tuple(v.shape) != tuple(like[k].shape)}
        if bad:
            raise ArtifactError(f"{root / 'tokens.safetensors'}: shapes {bad} (got, expected) differ from the other encoder draws' "
                                "(written under other params: rerun encoder_fusion_encoders)")
    return t

VOLUMES = Path("data/encoder_fusion/volumes")
VOLUME_VQA = Path("data/encoder_fusion/volume_vqa")
DECODER = Path("data/encoder_fusion/decoder")
EXPLORE = Path("data/encoder_fusion/explore")
RELIABILITY = Path("data/encoder_fusion/reliability")
