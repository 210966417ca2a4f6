"""Stage video_qa_train@<seed>: one training draw of the answerer and the relevance scorer on the training
videos' cached frames (no tool-use data: uniform frames, plain clips, frame-level relevance truth)."""
from __future__ import annotations

import argparse
import time

from paperworks.core.io import write_run_log
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.video_qa.artifacts import load_frame_table, read_world, save_model, seed_models, seed_plots, split_questions
from paperworks.video_qa.models import train_answerer, train_scorer
from paperworks.video_qa.params import Params


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
    train_q = split_questions(questions, "train")
    table, rows = load_frame_table(sorted(videos.loc[videos["split"] == "train", "video"]))
    plots = seed_plots(draw)
    t0 = time.process_time()
    answerer, a_hist = train_answerer(table, rows, train_q, p.answerer, p.pipeline.global_frames, p.pipeline.window_frames,
                                      derive_seed(seed, "video_qa", "answerer", draw), live_dir=plots / "live_answerer")
    t1 = time.process_time()
    scorer, s_hist = train_scorer(table, rows, train_q, p.scorer, p.pipeline.global_frames,
                                  derive_seed(seed, "video_qa", "scorer", draw), live_dir=plots / "live_scorer")
    t2 = time.process_time()
    save_model(seed_models(draw) / "answerer.safetensors", answerer)
    save_model(seed_models(draw) / "scorer.safetensors", scorer)
    write_run_log(f"video_qa_train_{draw}", {"questions": len(train_q), "answerer_s": t1 - t0, "scorer_s": t2 - t1})
    print(f"seed {draw}: answerer loss {a_hist[0]['loss']:.3f} → {a_hist[-1]['loss']:.3f}; "
          f"scorer {s_hist[0]['loss']:.3f} → {s_hist[-1]['loss']:.3f}")


if __name__ == "__main__":
    main()
