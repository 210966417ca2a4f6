"""Stage video_qa_world: scripted videos (train/dev/test split by video) and their questions."""
from __future__ import annotations

import collections

import pandas as pd

from paperworks.core.io import write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.video_qa.artifacts import WORLD
from paperworks.video_qa.params import Params
from paperworks.video_qa.world import QUESTION_SCHEMA, VIDEO_SCHEMA, build_world, questions_frame


@stage_main
def main() -> None:
    p = load_section("video_qa", Params)
    seed = global_seed(read_params_file())
    videos, questions = build_world(p.world, seed)
    split_of = {v["video"]: v["split"] for v in videos}
    write_parquet(WORLD / "videos.parquet", pd.DataFrame(videos, columns=VIDEO_SCHEMA.names), VIDEO_SCHEMA)
    write_parquet(WORLD / "questions.parquet", questions_frame(questions, split_of), QUESTION_SCHEMA)
    counts = collections.Counter((split_of[q.video], q.qtype) for q in questions)
    print(f"{len(videos)} videos, {len(questions)} questions: {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
