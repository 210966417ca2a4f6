"""Stage protocol_distill_generate: the knowledge base, documents, aliases and seven question sets."""
from __future__ import annotations

import logging

import pandas as pd

from paperworks.core.io import write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.world import WorldConfig, build_world, make_questions, question_to_row, world_to_dict

log = logging.getLogger("paperworks.protocol_distill")


@stage_main
def main() -> None:
    p = load_section("protocol_distill", Params)
    seed = derive_seed(global_seed(read_params_file()), "protocol_distill", "generate")
    w = p.world
    cfg = WorldConfig(w.n_persons, w.n_orgs, w.n_cities, w.n_collisions, w.doc_forms, w.redirect_share(), w.transfer_share(),
                      w.questions.model_dump())
    world = build_world(cfg, seed)
    questions = make_questions(world, cfg, seed)
    write_json(A.WORLD_JSON, world_to_dict(world))
    write_parquet(A.QUESTIONS, pd.DataFrame([question_to_row(q) for q in questions]), A.QUESTION_SCHEMA)
    log.info("world: %d entities, %d documents; %d questions", len(world.entities), len(world.docs), len(questions))


if __name__ == "__main__":
    main()
