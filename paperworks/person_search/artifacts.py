"""Where the track's artifacts live and how they are read back (checked, never pickled)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paperworks.core.io import ArtifactError, load_safetensors, read_parquet
from paperworks.core.params import ParamsError
from paperworks.person_search.data import ITEM_SCHEMA, QUERY_SCHEMA
from paperworks.person_search.text import VIEWS

DATA = Path("data/person_search")
MODELS = Path("models/person_search")
PLOTS = Path("plots/person_search")
METRICS = Path("metrics/person_search.json")

CORPUS = DATA / "corpus"
TEXT = DATA / "text"
RETRIEVAL = DATA / "retrieval"
FUSION = DATA / "fusion"
RERANK = DATA / "rerank"
LIVE = PLOTS / "live"


# One training run per seed (params ``person_search.seeds``): its models and everything downstream.
def encoder_path(backbone: str, seed: int) -> Path:
    return MODELS / f"seed_{seed}" / f"encoder_{backbone}.safetensors"


def expert_path(name: str, seed: int) -> Path:
    return MODELS / f"seed_{seed}" / f"expert_{name}.safetensors"


def live_dir(kind: str, name: str, seed: int) -> Path:
    """dvclive folder of one trained model (``kind``: encoder or expert)."""
    return LIVE / f"{kind}_{name}_s{seed}"


def live_curve_path(kind: str, name: str, seed: int) -> Path:
    """The held-out loss curve the convergence precondition reads."""
    return live_dir(kind, name, seed) / "plots" / "metrics" / "val" / "loss.tsv"


def run_dir(root: Path, seed: int) -> Path:
    return root / f"seed_{seed}"


def check_seed(seeds: list[int], seed: int) -> None:
    if seed not in seeds:
        raise ParamsError(f"person_search.seeds: seed {seed} is not listed (have {seeds})")


def read_items(name: str):
    return read_parquet(CORPUS / f"{name}.parquet", ITEM_SCHEMA)


def read_queries():
    return read_parquet(CORPUS / "queries.parquet", QUERY_SCHEMA)


def read_images(name: str, n: int, height: int, width: int) -> np.ndarray:
    t = load_safetensors(CORPUS / f"{name}_images.safetensors", {"images": (n, height, width, 3)})["images"]
    if t.dtype != torch.uint8:
        raise ArtifactError(f"{CORPUS / name}_images.safetensors: images must be uint8, got {t.dtype}")
    return t.numpy()


def read_text_views(n_train: int, n_queries: int) -> dict[str, np.ndarray]:
    path = TEXT / "embeddings.safetensors"
    raw = load_safetensors(path)
    if "embeddings" not in raw:
        raise ArtifactError(f"{path}: missing tensor 'embeddings'")
    n_text = raw["embeddings"].shape[0]
    expected = {"embeddings": (n_text, 384), "train_views": (n_train, len(VIEWS)), "query_views": (n_queries, len(VIEWS))}
    tensors = load_safetensors(path, expected)
    out = {k: v.numpy() for k, v in tensors.items()}
    for k in ("train_views", "query_views"):
        if out[k].max() >= n_text or out[k].min() < -1:
            raise ArtifactError(f"{path}: '{k}' points outside the {n_text} embeddings")
    return out
