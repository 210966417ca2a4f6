"""Reading and writing the track's artifacts (world tables, frame cache, checkpoints), checked on the way in."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from paperworks.core.io import ArtifactError, load_safetensors, read_json, read_parquet, save_safetensors, write_json
from paperworks.core.render.scene import Scene, SceneSpec
from paperworks.core.vision import EmbeddingCache, content_hash, encode_batched, frames_to_tensor
from paperworks.video_qa.world import QUESTION_SCHEMA, VIDEO_SCHEMA, Question, questions_from_frame

DATA = Path("data/video_qa")
MODELS = Path("models/video_qa")
PLOTS = Path("plots/video_qa")
WORLD = DATA / "world"
FRAMES = DATA / "frames"
INFER = DATA / "infer"


# one directory per training seed (params video_qa.seeds): matrix stages video_qa_train@<seed>, video_qa_infer@<seed>
def seed_models(seed: int) -> Path:
    return MODELS / f"seed_{seed}"


def seed_infer(seed: int) -> Path:
    return INFER / f"seed_{seed}"


def seed_plots(seed: int) -> Path:
    return PLOTS / f"seed_{seed}"


def read_world(root: Path = WORLD):
    """Videos (with parsed specs) and questions; a spec that does not validate is an ``ArtifactError``."""
    videos = read_parquet(root / "videos.parquet", VIDEO_SCHEMA)
    questions = read_parquet(root / "questions.parquet", QUESTION_SCHEMA)
    specs = {}
    for r in videos.itertuples(index=False):
        try:
            specs[r.video] = SceneSpec.model_validate_json(r.spec)
        except ValueError as e:
            raise ArtifactError(f"{root / 'videos.parquet'}: video {r.video} has an invalid scene spec ({e})") from None
    unknown = sorted(set(questions["video"]) - set(specs))
    if unknown:
        raise ArtifactError(f"{root / 'questions.parquet'}: questions about unknown videos {unknown[:3]}")
    return videos, questions, specs


def split_questions(questions, split: str) -> list[Question]:
    return questions_from_frame(questions[questions["split"] == split])


# ---------------------------------------------------------------- frame cache
def encode_videos(encoder: nn.Module, specs: dict[str, SceneSpec], size: int, root: Path, batch_size: int = 256) -> dict[str, str]:
    """Render every frame of every video and cache its embeddings (float16); returns video → cache key.

    The key is the content hash of the encoder's weights, the scene spec and the frame size, so a
    changed world or encoder never reads a stale entry. One video's frames are held at a time.
    """
    cache = EmbeddingCache(root / "cache")
    index = {}
    for vid, spec in tqdm(sorted(specs.items()), desc="encode videos", mininterval=10, disable=len(specs) < 20):
        key = content_hash(encoder, spec.model_dump_json(), size)
        scene = Scene(spec, size, size)
        cache.get_or_compute(key, lambda: encode_batched(encoder, scene.frames(range(spec.n_frames)), batch_size,
                                                         prepare=frames_to_tensor))
        index[vid] = key
    write_json(root / "index.json", {"size": size, "videos": index})
    return index


def load_frame_table(videos: list[str], root: Path = FRAMES) -> tuple[torch.Tensor, dict[str, int]]:
    """Cached embeddings of ``videos`` stacked ``V × T × E`` (float16) and each video's row.

    A missing, corrupt or wrongly keyed entry is an ``ArtifactError`` naming the video and file.
    """
    index = read_json(root / "index.json")
    if not isinstance(index, dict) or not isinstance(index.get("videos"), dict):
        raise ArtifactError(f"{root / 'index.json'}: not a frame-cache index (needs 'videos')")
    cache = EmbeddingCache(root / "cache")
    rows, tables = {}, []
    for vid in videos:
        key = index["videos"].get(vid)
        if key is None:
            raise ArtifactError(f"{root / 'index.json'}: video {vid} is not in the frame cache")
        emb = cache.get(key)
        if emb is None:
            raise ArtifactError(f"{cache.path(key)}: cached frames of video {vid} are missing")
        if tables and emb.shape != tables[0].shape:
            raise ArtifactError(f"{cache.path(key)}: video {vid} has {tuple(emb.shape)} embeddings, expected {tuple(tables[0].shape)}")
        rows[vid] = len(tables)
        tables.append(emb)
    if not tables:
        raise ArtifactError(f"{root}: no videos requested from the frame cache")
    return torch.stack(tables), rows


# ---------------------------------------------------------------- checkpoints
def save_model(path: Path, model: nn.Module) -> None:
    save_safetensors(path, {k: v.detach().contiguous() for k, v in model.state_dict().items()})


def load_model(path: Path, model: nn.Module) -> nn.Module:
    """Load weights into ``model``; missing, extra or mis-shaped tensors are an ``ArtifactError``."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tensors = load_safetensors(path, expected)
    if set(tensors) != set(expected):
        raise ArtifactError(f"{path}: tensors {sorted(set(tensors) ^ set(expected))[:4]} do not match the model")
    model.load_state_dict(tensors)
    return model.eval()


def frames_stats(table: torch.Tensor) -> dict:
    return {"videos": int(table.shape[0]), "frames_per_video": int(table.shape[1]), "embed_dim": int(table.shape[2]),
            "finite": bool(np.isfinite(table.float().numpy()).all())}
