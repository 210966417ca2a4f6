"""Paths, schemas and checked readers of the track's artifacts (all I/O goes through core.io)."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from paperworks.core.io import ArtifactError, read_json, read_parquet

DATA = Path("data/protocol_distill")
MODELS = Path("models/protocol_distill")
PLOTS = Path("plots/protocol_distill")
METRICS = Path("metrics/protocol_distill.json")

WORLD_JSON = DATA / "world.json"
QUESTIONS = DATA / "questions.parquet"
PROTOCOLS = DATA / "protocols.parquet"
TOKENIZER = DATA / "tokenizer.json"
SYNTHESIS_REPORT = DATA / "synthesis_report.json"
WARM_DIR = DATA / "warm"
RUNS_DIR = DATA / "runs"

QUESTION_SCHEMA = pa.schema([
    ("qid", pa.string()), ("qset", pa.string()), ("pool", pa.string()), ("task_type", pa.string()),
    ("text", pa.string()), ("answer", pa.string()), ("chain", pa.list_(pa.string())),
    ("subject_mention", pa.string()), ("surfaces", pa.list_(pa.string())),
    ("uses_alias", pa.bool_()), ("collides", pa.bool_()), ("redirected", pa.bool_()),
])
PROTOCOL_SCHEMA = pa.schema([
    ("qid", pa.string()), ("teacher", pa.string()), ("protocol_json", pa.string()), ("valid", pa.bool_()),
    ("reject_reason", pa.string()), ("trace", pa.string()), ("teacher_answer", pa.string()),
    ("teacher_correct", pa.bool_()), ("n_searches", pa.int64()), ("n_repairs", pa.int64()),
])
RUN_SCHEMA = pa.schema([
    ("size", pa.string()), ("seed", pa.int64()), ("run", pa.string()), ("method", pa.string()),
    ("teacher", pa.string()), ("kl_coef", pa.float64()),
    ("qid", pa.string()), ("qset", pa.string()), ("em", pa.float64()), ("answered", pa.float64()),
    ("length", pa.float64()), ("style_drift", pa.float64()), ("unsupported", pa.float64()), ("n_searches", pa.float64()),
    ("max_completion", pa.int64()), ("pool", pa.string()), ("redirected", pa.bool_()),
])


def warm_model_path(size: str, seed: int) -> Path:
    return MODELS / f"warm_{size}_{seed}.safetensors"


def warm_report_path(size: str, seed: int) -> Path:
    return WARM_DIR / f"{size}_{seed}.json"


def warm_live_dir(size: str, seed: int) -> Path:
    return PLOTS / f"live_warm_{size}_{seed}"


def run_table_path(size: str, run: str, seed: int) -> Path:
    return RUNS_DIR / f"{size}_{run}_{seed}.parquet"


def run_history_path(size: str, run: str, seed: int) -> Path:
    return RUNS_DIR / f"{size}_{run}_{seed}_history.json"


def online_model_path(size: str, run: str, seed: int) -> Path:
    return MODELS / "online" / f"{size}_{run}_{seed}.safetensors"


def online_live_dir(size: str, run: str, seed: int) -> Path:
    return PLOTS / f"live_online_{size}_{run}_{seed}"


def read_questions() -> list[dict]:
    df = read_parquet(QUESTIONS, QUESTION_SCHEMA)
    rows = df.to_dict("records")
    for r in rows:
        r["chain"], r["surfaces"] = list(r["chain"]), list(r["surfaces"])
    if not rows:
        raise ArtifactError(f"{QUESTIONS}: no questions")
    return rows


def read_protocol_rows() -> list[dict]:
    return read_parquet(PROTOCOLS, PROTOCOL_SCHEMA).to_dict("records")


def read_docs() -> list[str]:
    data = read_json(WORLD_JSON)
    if not isinstance(data, dict) or not isinstance(data.get("docs"), list) or not data["docs"]:
        raise ArtifactError(f"{WORLD_JSON}: expected an object with a non-empty 'docs' list")
    return data["docs"]


def read_entity_names() -> dict[str, tuple[str, ...]]:
    """eid → every name the entity goes by (its name, and the name a renamed entity's documents use)."""
    data = read_json(WORLD_JSON)
    if not isinstance(data, dict) or not isinstance(data.get("entities"), list):
        raise ArtifactError(f"{WORLD_JSON}: expected an object with an 'entities' list")
    return {e["eid"]: tuple(n for n in (e["name"], e.get("filed_as")) if n) for e in data["entities"]}
