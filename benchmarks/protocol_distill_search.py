"""The search tool's cost per query on the default world: rank-bm25's `get_scores` (every document,
a Python loop per query term) against `SearchTool.bm25_scores` (posting lists, same floats).

    python benchmarks/protocol_distill_search.py [--queries N]

The queries are those the teachers issue on the default world (seed 0), every one distinct, so the
tool's per-query cache never answers. Prints one table and whether the two return the same documents.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from paperworks.protocol_distill.search import SearchTool, terms_of  # noqa: E402
from paperworks.protocol_distill.teacher import TEACHERS, run_teacher  # noqa: E402
from paperworks.protocol_distill.world import WorldConfig, build_world, make_questions  # noqa: E402


def rank_bm25_search(tool: SearchTool, query: str) -> tuple[str, ...]:
    """The search as it was before posting lists: rank-bm25 scores every document."""
    terms = [t for t in terms_of(query) if t in tool._vocab]
    if not terms:
        return ()
    scores = tool._bm25.get_scores(terms)
    order = np.lexsort((np.arange(len(scores)), -scores))[: tool.top_k]
    return tuple(tool.docs[i] for i in order if scores[i] > 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000)
    args = ap.parse_args()
    w = yaml.safe_load((ROOT / "conf/default/protocol_distill.yaml").read_text())["world"]
    share = lambda key: w[key]["share"] if w[key]["enabled"] else 0.0  # noqa: E731
    cfg = WorldConfig(w["n_persons"], w["n_orgs"], w["n_cities"], w["n_collisions"], w["doc_forms"], share("redirects"),
                      share("transfer"), questions_per_set=w["questions"])
    world = build_world(cfg, 0)
    tool = SearchTool(world.docs)
    issued: list[str] = []
    record = tool.search
    tool.search = lambda q: (issued.append(q), record(q))[1]
    run_teacher(world, tool, make_questions(world, cfg, 0), TEACHERS["opus"], 0)
    queries = list(dict.fromkeys(issued))[: args.queries]
    rows = []
    for name, fn in (("rank-bm25 get_scores (all documents)", lambda q: rank_bm25_search(tool, q)),
                     ("posting lists (SearchTool.bm25_scores)", tool._search)):
        t = time.process_time()
        results = [fn(q) for q in queries]
        rows.append((name, (time.process_time() - t) / len(queries) * 1e3, results))
    print(f"default world: {len(world.docs)} documents, {len(queries)} distinct teacher queries, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'scorer':42s} {'CPU ms / search':>16s}")
    for name, ms, _ in rows:
        print(f"{name:42s} {ms:16.2f}")
    print("same documents for every query:", rows[0][2] == rows[1][2])


if __name__ == "__main__":
    main()
