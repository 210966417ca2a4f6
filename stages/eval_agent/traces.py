"""Stage eval_agent_traces: the scripted planner's sessions on population generators, unrolled into step records.

Each record is one decision: instruction, history, observation → reasoning + JSON action (as
EA-CoT's instruction / history / <think> / <information> steps). Population generators are
neither evaluated nor in the reference tables' test: the planner is trained on other models
than those it is scored on. The last ``planner.heldout_generators`` population generators'
records only feed the held-out loss (the plateau check).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from paperworks.core.io import write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import PLANNER, RECORD_SCHEMA, read_outcomes
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.planner import StepState, scripted_records
from paperworks.eval_agent.report import levels, pools
from paperworks.eval_agent.world import STRATA


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    seed = global_seed(read_params_file())
    outcomes = read_outcomes()
    edges = levels(outcomes, p.zoo.dims)
    population = sorted(outcomes.loc[outcomes["role"] == "population", "model"].unique(), key=lambda m: int(m[3:]))
    heldout = set(population[-p.planner.heldout_generators:])
    rows = []
    for gen in population:
        for dim in p.zoo.dims:
            pool = pools(outcomes, gen, "a", dim)
            weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(pool.stratum)
            for rep in range(p.planner.trace_repeats):
                rng = np.random.default_rng(derive_seed(seed, "eval_agent", "trace", gen, dim, rep))
                s = StepState.start(pool, weights, edges[dim], p.agent, rng)
                for k, r in enumerate(scripted_records(s, dim, STRATA[dim])):
                    rows.append({"split": "heldout" if gen in heldout else "train", "generator": gen, "dim": dim,
                                 "repeat": rep, "step": k, **r})
    df = pd.DataFrame(rows, columns=RECORD_SCHEMA.names)
    write_parquet(PLANNER / "records.parquet", df, RECORD_SCHEMA)
    print(f"{len(df)} step records ({int((df['split'] == 'train').sum())} train) from "
          f"{df.groupby(['generator', 'dim', 'repeat']).ngroups} scripted sessions")


if __name__ == "__main__":
    main()
