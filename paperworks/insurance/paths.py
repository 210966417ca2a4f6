"""Where the insurance stages read and write (one place, mirrored by dvc.yaml)."""
from pathlib import Path

DATA = Path("data/insurance")
MODELS = Path("models/insurance")
PLOTS = Path("plots/insurance")
METRICS = Path("metrics/insurance.json")

CATALOGUE = DATA / "catalogue"
SERVICES = CATALOGUE / "services.parquet"
PROCEDURES = CATALOGUE / "procedures.parquet"
QUERIES = CATALOGUE / "queries.parquet"
CORPUS = CATALOGUE / "corpus.json"
AUDIT = CATALOGUE / "audit.json"

LISTS = DATA / "lists"
FIRST_STAGE = LISTS / "first_stage.json"


def lists_file(split: str) -> Path:
    return LISTS / f"{split}.parquet"


BACKBONE = {"general": MODELS / "general", "domain": MODELS / "domain"}
ZEROSHOT = DATA / "zeroshot"
GRID = DATA / "grid"
TUNE = DATA / "tune"
OPTUNA_DIR = DATA / "optuna"
SEEDS = DATA / "seeds"
BEST_MODEL = MODELS / "best_cross_encoder"


def config_name(backbone: str, loss: str, freeze: str) -> str:
    return f"{backbone}-{loss}-{freeze}"
