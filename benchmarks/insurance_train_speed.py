"""Insurance track: cross-encoder *training* throughput (query–candidate pairs/s) per freezing strategy.

    python benchmarks/insurance_train_speed.py [--steps 12] [--threads 2] [--list-size 8] [--batch-lists 4]

MiniLM-L6 with a fresh one-logit head, ListNet loss (the three listwise losses cost the same:
the encoder forward/backward dominates), lists of ``--list-size`` catalogue procedures per
generated query. Prints one row per freezing strategy plus the scoring (inference) rate, with
the load average beside it: the default profile's grid is sized from these numbers.
Tests never assert on them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.insurance_throughput import table  # noqa: E402  (the one table printer of the insurance benchmarks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--list-size", type=int, default=8)
    ap.add_argument("--batch-lists", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=48)
    args = ap.parse_args()
    import numpy as np
    import pandas as pd
    import torch

    from paperworks.insurance import backbone as bb
    from paperworks.insurance import catalogue as cat
    from paperworks.insurance import crossencoder as ce

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    services, procs = cat.build_catalogue(708, (2, 4), (0.7, 0.1, 0.2), rng)
    queries = cat.generate_queries(services, procs, 400, {"direct": 0.34, "symptom": 0.33, "coverage": 0.33}, 0.05, 0.15, rng)
    names = procs["name"].tolist()
    n_lists = args.steps * args.batch_lists
    lists = pd.DataFrame([{"query_id": i, "query": q, "intent": "direct",
                           "docs": [names[j] for j in rng.choice(len(names), args.list_size, replace=False)],
                           "labels": [3.0, 2.0] + [0.0] * (args.list_size - 2)}
                          for i, q in enumerate(queries["text"].tolist()[:n_lists])])
    rows = []
    for freeze in ce.FREEZES:
        model = ce.load_cross_encoder(bb.minilm_path(), args.max_length, seed=0)
        cfg = ce.TrainConfig(loss="listnet", freeze=freeze, lr=5e-5, batch_lists=args.batch_lists,
                             train_list_size=args.list_size, max_length=args.max_length)
        ce.train_listwise(model, lists.iloc[: 2 * args.batch_lists], cfg)  # warm-up (allocator, tokenizer)
        load0 = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), time.process_time()
        rec = ce.train_listwise(model, lists, cfg)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        pairs = n_lists * args.list_size
        rows.append([f"train ({freeze})", f"{rec['trainable_params'] / 1e6:.1f}M", pairs, f"{wall:.1f}", f"{cpu:.1f}", f"{1000 * cpu / pairs:.1f}",
                     f"{pairs / wall:.0f}", f"{load0:.2f}/{os.getloadavg()[0]:.2f}"])
    pairs = [(q, d) for q, ds in zip(lists["query"], lists["docs"]) for d in ds]
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    model.predict(pairs, batch_size=64, show_progress_bar=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows.append(["score (inference)", "-", len(pairs), f"{wall:.1f}", f"{cpu:.1f}", f"{1000 * cpu / len(pairs):.1f}", f"{len(pairs) / wall:.0f}",
                 f"{load0:.2f}/{os.getloadavg()[0]:.2f}"])
    header = ["what", "trainable", "pairs", "wall s", "cpu s", "cpu ms/pair", "pairs/s (wall)", "load 1-min before/after"]
    table(f"insurance cross-encoder training throughput: MiniLM-L6, torch threads {args.threads}, {os.cpu_count()} CPUs, "
          f"lists of {args.list_size}, {args.batch_lists} lists per step, max_length {args.max_length}", header, rows)


if __name__ == "__main__":
    main()
