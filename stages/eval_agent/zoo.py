"""Stage eval_agent_zoo: the generators (hidden profiles) and each dimension's prompt file."""
from __future__ import annotations

import collections

from paperworks.core.io import write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import PROMPT_SCHEMA, ZOO, prompts_frame
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.world import build_prompts, build_zoo, generator_record


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    seed = global_seed(read_params_file())
    zoo = build_zoo(p.zoo, seed)
    prompts = build_prompts(p.zoo, seed)
    write_json(ZOO / "generators.json", {"generators": [generator_record(g) for g in zoo]})
    write_parquet(ZOO / "prompts.parquet", prompts_frame(prompts), PROMPT_SCHEMA)
    roles = collections.Counter(g.role for g in zoo)
    print(f"{len(zoo)} generators {dict(roles)}; {len(prompts)} prompts over {len(p.zoo.dims)} dimensions")


if __name__ == "__main__":
    main()
