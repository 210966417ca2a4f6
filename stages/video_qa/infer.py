"""Stage video_qa_infer: every dev and test question through stage 1, the stage-2 variants and the
two precondition probes (oracle window, random crop); one video's relevance map as a figure."""
from __future__ import annotations

import time

import numpy as np

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log, write_text
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.video_qa import report
from paperworks.video_qa.artifacts import FRAMES, INFER, MODELS, PLOTS, load_frame_table, load_model, read_world, split_questions
from paperworks.video_qa.models import Answerer, RelevanceScorer
from paperworks.video_qa.params import Params
from paperworks.video_qa.pipeline import fit_check_threshold, run_question


@stage_main
def main() -> None:
    p = load_section("video_qa", Params)
    seed = global_seed(read_params_file())
    videos, questions, _ = read_world()
    evaluated = videos[videos["split"].isin(["dev", "test"])]
    table, rows = load_frame_table(sorted(evaluated["video"]), FRAMES)
    answerer = load_model(MODELS / "answerer.safetensors", Answerer(table.shape[2], p.answerer))
    scorer = load_model(MODELS / "scorer.safetensors", RelevanceScorer(table.shape[2], p.scorer))
    dev_q = split_questions(questions, "dev")
    threshold, fit = fit_check_threshold(table, rows, dev_q, scorer, p.pipeline)
    pp = p.pipeline.model_copy(update={"relevance_threshold": threshold})
    write_json(INFER / "check_threshold.json", {"relevance_threshold": threshold, **fit})
    out, example = [], None
    t0 = time.process_time()
    for split in ("dev", "test"):
        for q in split_questions(questions, split):
            rng_seed = derive_seed(seed, "video_qa", "infer", q.qid)
            records, trace = run_question(table[rows[q.video]], answerer, scorer, q, pp, rng_seed)
            out += [{"split": split, **r} for r in records]
            if split == "test" and (example is None or (example[0].qtype != "local" and q.qtype == "local")):
                example = (q, trace)  # the first local test question (else the first test question)
    t1 = time.process_time()
    df = report.results_frame(out)
    write_parquet(INFER / "results.parquet", df, report.RESULT_SCHEMA)
    if example is not None:
        q, trace = example
        write_text(PLOTS / "relevance_map.csv", report.relevance_map_frame(trace).to_csv(index=False, float_format="%.6g"))
        with atomic_path(PLOTS / "relevance_map.png") as tmp:
            report.plot_relevance_map(q, trace, threshold, tmp)
    write_run_log("video_qa_infer", {"questions": int(df["qid"].nunique()), "process_s": t1 - t0})
    print(f"{df['qid'].nunique()} questions × {df['variant'].nunique()} variants")


if __name__ == "__main__":
    main()
