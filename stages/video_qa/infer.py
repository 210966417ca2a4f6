"""Stage video_qa_infer@<seed>: with one training draw's answerer and scorer, every dev and test question
through stage 1, the stage-2 variants and the two precondition probes (oracle window, random crop); one
video's relevance map as a figure."""
from __future__ import annotations

import argparse
import time

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log, write_text
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.video_qa import report
from paperworks.video_qa.artifacts import (FRAMES, load_frame_table, load_model, read_world, seed_infer, seed_models, seed_plots,
                                           split_questions)
from paperworks.video_qa.models import Answerer, RelevanceScorer
from paperworks.video_qa.params import Params
from paperworks.video_qa.pipeline import fit_check_threshold, run_question


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="one of params video_qa.seeds")
    draw = ap.parse_args().seed
    p = load_section("video_qa", Params)
    if draw not in p.seeds:
        raise ParamsError(f"--seed {draw}: not in params video_qa.seeds {p.seeds}")
    seed = global_seed(read_params_file())
    videos, questions, _ = read_world()
    evaluated = videos[videos["split"].isin(["dev", "test"])]
    table, rows = load_frame_table(sorted(evaluated["video"]), FRAMES)
    answerer = load_model(seed_models(draw) / "answerer.safetensors", Answerer(table.shape[2], p.answerer))
    scorer = load_model(seed_models(draw) / "scorer.safetensors", RelevanceScorer(table.shape[2], p.scorer))
    dev_q = split_questions(questions, "dev")
    threshold, fit = fit_check_threshold(table, rows, dev_q, scorer, p.pipeline)
    pp = p.pipeline.model_copy(update={"relevance_threshold": threshold})
    out, example = [], None
    t0 = time.process_time()
    for split in ("dev", "test"):
        for q in split_questions(questions, split):
            rng_seed = derive_seed(seed, "video_qa", "infer", draw, q.qid)
            records, trace = run_question(table[rows[q.video]], answerer, scorer, q, pp, rng_seed)
            out += [{"split": split, **r} for r in records]
            if split == "test" and (example is None or (example[0].qtype != "local" and q.qtype == "local")):
                example = (q, trace)  # the first local test question (else the first test question)
    t1 = time.process_time()
    df = report.results_frame(out)
    with atomic_path(seed_infer(draw)) as tmp:  # results and threshold appear together, or not at all
        write_json(tmp / "check_threshold.json", {"relevance_threshold": threshold, **fit})
        write_parquet(tmp / "results.parquet", df, report.RESULT_SCHEMA)
    if example is not None:
        q, trace = example
        plots = seed_plots(draw)
        write_text(plots / "relevance_map.csv", report.relevance_map_frame(trace).to_csv(index=False, float_format="%.6g"))
        with atomic_path(plots / "relevance_map.png") as tmp:
            report.plot_relevance_map(q, trace, threshold, tmp)
    write_run_log(f"video_qa_infer_{draw}", {"questions": int(df["qid"].nunique()), "process_s": t1 - t0})
    print(f"seed {draw}: {df['qid'].nunique()} questions × {df['variant'].nunique()} variants")


if __name__ == "__main__":
    main()
