"""Paths of the track's artifacts and their checked readers."""
from __future__ import annotations

from pathlib import Path

from paperworks.core.io import ArtifactError, read_json

DATA = Path("data/mol")
WORLD = DATA / "world"
TRAIN = DATA / "train"
ROUTER = DATA / "router"
VERSIONS = DATA / "versions"
VERSIONS_MONOLITH = DATA / "versions_monolith"  # the same loop on one monolithic model (the one LoRA on the mixture)
VERSIONS_REPLICATES = DATA / "versions_replicates"  # the loop on further adapter seeds, both layouts
MODELS = Path("models/mol")
PLOTS = Path("plots/mol")
BASE = MODELS / "base.safetensors"
BASE_HISTORY = MODELS / "base_history.json"
WORLD_KEYS = ("corpus_train", "corpus_dev", "tables", "router_train", "test_conversations", "train", "dev", "test")


def seed_dir(seed: int) -> Path:
    return TRAIN / f"seed_{seed}"


def single_lora_file(seed: int) -> Path:
    """The one LoRA on the mixture that ``mol_train@<seed>`` trained (v0 of the monolithic loop)."""
    return seed_dir(seed) / "single_lora.safetensors"


def replicate_dir(layout: str, seed: int) -> Path:
    """One replicate loop run (stage ``mol_versions_replicate@<seed>-<layout>``): store, lineage.csv, metrics.json."""
    return VERSIONS_REPLICATES / f"{layout}_seed_{seed}"


def loop_dir(layout: str, seed: int, primary_seed: int) -> Path:
    """The store of the loop run of ``layout`` on adapter seed ``seed`` (``versions.seed``'s, or a replicate's)."""
    if seed == primary_seed:
        return VERSIONS if layout == "mol" else VERSIONS_MONOLITH
    return replicate_dir(layout, seed)


def read_world(root: Path = WORLD) -> dict:
    world = read_json(root / "world.json")
    missing = [k for k in WORLD_KEYS if k not in world]
    if missing:
        raise ArtifactError(f"{root / 'world.json'}: missing {missing} (rerun mol_data)")
    return world


def read_seed_results(seed: int) -> dict:
    path = seed_dir(seed) / "results.json"
    res = read_json(path)
    for key in ("seed", "suite", "turns", "histories", "trainable"):
        if key not in res:
            raise ArtifactError(f"{path}: missing '{key}' (rerun mol_train@{seed})")
    if int(res["seed"]) != seed:
        raise ArtifactError(f"{path}: holds seed {res['seed']}, expected {seed}")
    return res
