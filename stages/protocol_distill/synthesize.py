"""Stage protocol_distill_synthesize: the multi-agent teacher variants write protocols and NL traces;
the schema rejects malformed protocols (counted, with reasons); the word tokenizer is built."""
from __future__ import annotations

import collections
import json
import logging

import numpy as np
import pandas as pd

from paperworks.core.io import read_json, write_json, write_parquet
from paperworks.core.lm.tokenizer import save_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.episode import answer_context, build_word_tokenizer
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.protocol import protocol_to_context, reason_kind
from paperworks.protocol_distill.search import SearchTool
from paperworks.protocol_distill.teacher import TEACHERS, run_teacher
from paperworks.protocol_distill.world import question_from_row, world_from_dict

log = logging.getLogger("paperworks.protocol_distill")


@stage_main
def main() -> None:
    p = load_section("protocol_distill", Params)
    gseed = global_seed(read_params_file())
    world = world_from_dict(read_json(A.WORLD_JSON))
    questions = [question_from_row(r) for r in A.read_questions()]
    tool = SearchTool(world.docs, p.search.top_k)
    rows: list[dict] = []
    report: dict = {}
    variants = [(t, False) for t in p.teachers] + [(t, True) for t in p.style_teachers]
    for base, styled in variants:
        name = f"{base}_styled" if styled else base
        # the styled variant replays the same explorations with the same synthesizer slips (same seed)
        teacher_rows = run_teacher(world, tool, questions, TEACHERS[base], derive_seed(gseed, "protocol_distill", "synthesize", base),
                                   styled=styled)
        reasons = collections.Counter(reason_kind(r["reject_reason"]) for r in teacher_rows if not r["valid"])
        report[name] = {
            "protocols": len(teacher_rows),
            "valid": sum(r["valid"] for r in teacher_rows),
            "rejected": sum(not r["valid"] for r in teacher_rows),
            "reject_reasons": dict(reasons),
            "teacher_em": float(np.mean([r["teacher_correct"] for r in teacher_rows])),
            "mean_searches": float(np.mean([r["n_searches"] for r in teacher_rows])),
            "mean_repairs": float(np.mean([r["n_repairs"] for r in teacher_rows])),
            "mean_trace_words": float(np.mean([len(r["trace"].split()) for r in teacher_rows])),
        }
        rows.extend(teacher_rows)
        log.info("teacher %s: %d valid, %d rejected", name, report[name]["valid"], report[name]["rejected"])
    # the vocabulary covers everything any branch can read or write
    texts = list(world.docs) + [q.text for q in questions] + [answer_context(q.answer) for q in questions]
    texts += [r["trace"] for r in rows if not r["teacher"].endswith("_styled")]
    texts += [protocol_to_context(json.loads(r["protocol_json"])) for r in rows if r["valid"]]
    tokenizer = build_word_tokenizer(texts)
    save_tokenizer(tokenizer, A.TOKENIZER)
    write_parquet(A.PROTOCOLS, pd.DataFrame(rows), A.PROTOCOL_SCHEMA)
    report["vocab_size"] = len(tokenizer)
    write_json(A.SYNTHESIS_REPORT, report)


if __name__ == "__main__":
    main()
