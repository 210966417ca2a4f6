"""Paths and schemas of the track's artifacts, checked on the way in."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from paperworks.core.io import ArtifactError, read_json, read_parquet
from paperworks.core.render.scene import ScenePrompt
from paperworks.eval_agent.world import BenchPrompt, Generator

DATA = Path("data/eval_agent")
MODELS = Path("models/eval_agent")
PLOTS = Path("plots/eval_agent")
ZOO = DATA / "zoo"
TOOLS = DATA / "tools"
BENCH = DATA / "bench"
TOOL_WEIGHTS = MODELS / "tools.safetensors"
LIVE_TOOLS = PLOTS / "live_tools"

PROMPT_SCHEMA = pa.schema([("dim", pa.string()), ("index", pa.int64()), ("stratum", pa.int64()),
                           ("prompt", pa.string()), ("text", pa.string())])
OUTCOME_SCHEMA = pa.schema([("model", pa.string()), ("family", pa.string()), ("role", pa.string()), ("run", pa.string()),
                            ("dim", pa.string()), ("prompt", pa.int64()), ("stratum", pa.int64()), ("sample", pa.int64()),
                            ("tool", pa.int8()), ("truth", pa.int8())])


def prompts_frame(prompts: list[BenchPrompt]) -> pd.DataFrame:
    return pd.DataFrame([{"dim": b.dim, "index": b.index, "stratum": b.stratum, "prompt": b.prompt.model_dump_json(),
                          "text": b.prompt.text()} for b in prompts], columns=PROMPT_SCHEMA.names)


def read_zoo(root: Path = ZOO) -> tuple[list[Generator], list[BenchPrompt]]:
    """Generators and prompts; a record that does not parse is an ``ArtifactError`` naming the file."""
    raw = read_json(root / "generators.json")
    try:
        zoo = [Generator(**g) for g in raw["generators"]]
    except (KeyError, TypeError) as e:
        raise ArtifactError(f"{root / 'generators.json'}: not a generator list ({e})") from None
    df = read_parquet(root / "prompts.parquet", PROMPT_SCHEMA)
    prompts = []
    for r in df.itertuples(index=False):
        try:
            prompts.append(BenchPrompt(r.dim, int(r.index), int(r.stratum), ScenePrompt.model_validate_json(r.prompt)))
        except ValueError as e:
            raise ArtifactError(f"{root / 'prompts.parquet'}: prompt {r.dim}/{r.index} does not validate ({e})") from None
    return zoo, prompts


def read_outcomes(root: Path = BENCH) -> pd.DataFrame:
    df = read_parquet(root / "outcomes.parquet", OUTCOME_SCHEMA)
    bad = ~df["tool"].isin([0, 1]) | ~df["truth"].isin([0, 1])
    if bad.any():
        raise ArtifactError(f"{root / 'outcomes.parquet'}: {int(bad.sum())} verdicts are not 0/1")
    return df

PLANNER = DATA / "planner"   # one directory per planner training draw (eval_agent.planner.seeds): seed_<s>/


def planner_dir(seed: int) -> Path:
    return PLANNER / f"seed_{seed}"


def planner_models(seed: int) -> Path:
    return MODELS / "planner" / f"seed_{seed}"


def planner_live(seed: int) -> Path:
    return PLOTS / "planner" / f"seed_{seed}" / "live_planner"


RECORD_SCHEMA = pa.schema([("split", pa.string()), ("generator", pa.string()), ("dim", pa.string()), ("repeat", pa.int64()),
                           ("step", pa.int64()), ("instruction", pa.string()), ("history", pa.string()), ("observation", pa.string()),
                           ("reasoning", pa.string()), ("action", pa.string()), ("prompt", pa.string()), ("completion", pa.string())])
ROLLOUT_SCHEMA = pa.schema([("model", pa.string()), ("family", pa.string()), ("role", pa.string()), ("dim", pa.string()),
                            ("repeat", pa.int64()), ("level", pa.int64()), ("n", pa.int64()), ("estimate", pa.float64()),
                            ("rounds", pa.int64()), ("reason", pa.string()), ("decisions", pa.int64()), ("invalid", pa.int64()),
                            ("retried_ok", pa.int64()), ("fallbacks", pa.int64())])


def read_rollouts(root: Path) -> pd.DataFrame:
    df = read_parquet(root / "rollouts.parquet", ROLLOUT_SCHEMA)
    bad = (df["invalid"] != df["retried_ok"] + df["fallbacks"]) | (df["invalid"] > df["decisions"]) | ~df["level"].between(0, 4)
    if bad.any():
        raise ArtifactError(f"{root / 'rollouts.parquet'}: {int(bad.sum())} rows with inconsistent action counts or levels")
    return df

# ---------------------------------------------------------------- the text-to-video suite (paper profile)
T2V = DATA / "t2v"


def t2v_prompts_frame(prompts) -> pd.DataFrame:
    return pd.DataFrame([{"dim": b.dim, "index": b.index, "stratum": b.stratum, "prompt": b.prompt.model_dump_json(),
                          "text": b.prompt.text()} for b in prompts], columns=PROMPT_SCHEMA.names)


def read_t2v(root: Path = T2V) -> tuple[dict, pd.DataFrame]:
    """The suite's record and its outcomes. When the suite is on, every (model, run, dimension) must hold the same number
    of samples (prompts × samples per prompt) and every dimension of the record must be there; an off suite has none."""
    suite = read_json(root / "suite.json")
    if not isinstance(suite.get("enabled"), bool):
        raise ArtifactError(f"{root / 'suite.json'}: no boolean 'enabled'")
    df = read_outcomes(root)
    if not suite["enabled"]:
        if len(df):
            raise ArtifactError(f"{root / 'outcomes.parquet'}: {len(df)} samples although suite.json says the suite is off")
        return suite, df
    try:
        dims, per_run = list(suite["dims"]), int(suite["prompts_per_dim"]) * int(suite["samples_per_prompt"])
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{root / 'suite.json'}: incomplete record ({e})") from None
    sizes = df.groupby(["model", "run", "dim"]).size()
    bad = sizes[sizes != per_run]
    if len(bad) or set(df["dim"]) != set(dims):
        raise ArtifactError(f"{root / 'outcomes.parquet'}: {len(bad)} (model, run, dimension) cells differ from {per_run} samples or the "
                            f"dimensions {sorted(set(df['dim']))} differ from suite.json's {sorted(dims)}; rerun eval_agent_t2v_bench")
    runs = df.groupby("model")["run"].nunique()
    roles = df.drop_duplicates("model").set_index("model")["role"]
    want = roles.map({"population": 1}).fillna(2)
    if (runs != want.loc[runs.index]).any() or (sizes.groupby(level=["model", "run"]).size() != len(dims)).any():
        raise ArtifactError(f"{root / 'outcomes.parquet'}: a model lacks a run or a dimension; rerun eval_agent_t2v_bench")
    return suite, df
