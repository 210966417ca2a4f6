"""Stage-1 throughput of the person-search track at PAB gallery sizes, end to end, with where the time goes.

One command (377 s on an idle 2-core AVX-512/BF16 machine with all five precisions, 2026-12-07; the
bfloat16 ones are skipped on CPUs without native bf16) prints the tables; ``--write`` also writes
``benchmarks/results/person_search_index.md`` (run it on an idle machine for the committed figures):

    PYTHONPATH=$PWD python benchmarks/person_search_index.py --write

For each gallery size (default 5,949 = the default profile, 36,773 = PAB) and thread count (1, 2):

- **stage 1 end to end** (the method, ``retrieval.Stage1`` + ``embed.QueryEncoder``): query captions
  → facet parsing → MiniLM-L6 (the real model) → the 3 backbones' text towers → torch top-K of the 6
  anchor branches → pool → 18 branches scored on the pool (facets) → fusion over padded pools.
  Queries are encoded in batches, one forward pass per ``--batch-size`` distinct view texts, the
  MiniLM cache empty at the start of each run. Queries/s over the whole chain, and ms per query of
  each step; every MiniLM precision of ``--precisions`` gets the median of ``--repeats`` cold runs
  (the same queries and gallery across precisions). By default the bfloat16 precisions are measured
  only on CPUs with native bf16 (avx512_bf16 / amx_bf16): without it they are emulated and several
  times slower than float32 (4.4× measured on an AVX2-only EPYC).
- **agreement with float32** of every other precision, on the same queries and the same gallery:
  cosine of the MiniLM embeddings of the queries' view texts (min / mean), and stage 1's outputs:
  overlap of the top-K anchor pools, of the fused top-10, the same top-1, and R@1 / R@10 of the
  target. Two galleries: (a) a **caption gallery** (``--agree-queries`` query specs, each with a
  paraphrase of its own caption as the target and ``--agree-distractors`` single-attribute edits as
  distractors, all embedded from their captions in float32 through the same towers: the structure of
  the track's gallery, where neighbours differ in one attribute), and (b) the timing runs' random
  gallery (no structure: the top-10 are near-ties, the harshest case for an approximate query).
- **headline**: with ``--precision auto`` (default) each row's headline is the fastest precision
  that agrees with float32 on the caption gallery (mean cosine ≥ ``--min-cosine``, 0.99, and mean
  fused top-10 overlap ≥ ``--min-top10``, 0.95); float32 itself always qualifies. The pipeline's own
  precision (``text.precision``) is a param and does not follow the benchmark.
- the headline chain with faiss flat as the anchor engine, and on a second batch of new queries
  through the first run's encoder (its cache holds the first batch's view texts).
- **faiss flat anchor**: ``IndexFlatIP`` on the same embeddings, the same 6 anchor searches alone
  (the physical floor of an exact search) and one top-10 branch search.
- **old path** (before issue 13): all 18 branches searched over the gallery + the per-query fusion
  loop (``fusion.fuse_all_slow``), on fewer queries.

The timing galleries are random unit vectors of the trained shape (G × 128 per backbone): the
gallery is embedded offline, and search cost does not depend on what the vectors encode. The
text towers are untrained ``DualEncoder`` text heads (same shapes as trained ones). The machine's
load average (``/proc/loadavg``, 1 min) is printed beside every row, the CPU's vector extensions
in the header: on a shared machine the figures are loaded and say so.

A reduced check (≈ 1.5 min on 2 cores; not for the results file):

    PYTHONPATH=$PWD python benchmarks/person_search_index.py --sizes 36773 --threads 1,2 --queries 100 \
        --repeats 1 --old-queries 10 --agree-queries 100
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from paperworks.person_search.data import random_spec, single_edits
from paperworks.person_search.embed import PRECISIONS, QueryEncoder, encode_texts, load_minilm
from paperworks.person_search.fusion import FusionConfig, branch_weights, fuse_all_slow, fuse_pools, pool_scores
from paperworks.person_search.retrieval import FlatIndex, Stage1, search_branches
from paperworks.person_search.text import VIEWS, caption
from paperworks.person_search.towers import DualEncoder

SIZES = (5949, 1978 + 34795)  # default profile (320 targets × 18.59) and PAB (targets + distractors)
DIM, H, W = 128, 64, 48
BACKBONES = ("cnn", "resnet", "vit")
WEIGHTS = (1.0, 1.0, 0.5, 0.5, 0.5, 0.5)
OUT = Path("benchmarks/results/person_search_index.md")


def load1() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def captions(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    specs = [random_spec(rng) for _ in range(n)]
    return [caption(s.person, rng, 0.1, s.light, s.weather, s.landmark) for s in specs]


def towers() -> list:
    torch.manual_seed(0)
    models = [DualEncoder(bb, DIM, H, W).eval() for bb in BACKBONES]

    def project(model):
        def f(emb: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return model.encode_texts(torch.from_numpy(emb)).numpy()
        return f
    return [project(m) for m in models]


def stage1_run(size: int, n_queries: int, topk: int, minilm, seed: int, precision: str, batch_size: int,
               engine: str = "torch", extras: bool = True, enc: QueryEncoder | None = None) -> dict:
    """One end-to-end stage-1 run over ``n_queries`` fresh captions; seconds per step. ``enc``: an
    encoder whose cache already holds earlier queries' view texts (default: a new one, cache empty)."""
    rng = np.random.default_rng(seed)
    galleries = [unit(rng, size, DIM) for _ in BACKBONES]
    texts = captions(n_queries, seed)
    enc = enc or QueryEncoder(towers(), model=minilm, batch_size=batch_size, precision=precision)
    cached_before = len(enc.cache)
    cfg = FusionConfig(WEIGHTS, agreement_depth=topk)
    stage1 = Stage1(galleries, cfg, topk, engine)  # index build: offline, not timed
    t = {}
    t0 = time.perf_counter()
    views = enc.parse(texts)
    t1 = time.perf_counter()
    emb, present = enc.minilm_views(views)  # MiniLM on the batch's distinct view texts
    t2 = time.perf_counter()
    qviews = enc.project(emb, present)
    t3 = time.perf_counter()
    pool = stage1.pool(qviews, present)
    t4 = time.perf_counter()
    raw = pool_scores(pool, stage1.galleries, qviews)
    t5 = time.perf_counter()
    top10, _ = fuse_pools(pool, raw, branch_weights(present, len(BACKBONES), cfg), cfg, 10)
    t6 = time.perf_counter()
    t["parse"], t["MiniLM"], t["text towers"], t["search"], t["facets"], t["fusion"] = (
        t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)
    t["total"] = t6 - t0
    t["texts_per_query"] = (len(enc.cache) - cached_before) / n_queries
    t["encoder"] = enc
    t["mean_pool"] = float((pool >= 0).sum(1).mean())
    t["pool"], t["top10"] = pool, top10
    if not extras:
        return t
    # faiss flat anchor on the same embeddings: the same 6 anchor searches alone, and one top-10 branch
    anchors = [np.ascontiguousarray(qv[:, :2].reshape(-1, DIM)) for qv in qviews]
    fidx = [FlatIndex(g, "faiss") for g in galleries]
    f0 = time.perf_counter()
    for ix, a in zip(fidx, anchors):
        ix.search(a, topk)
    f1 = time.perf_counter()
    fidx[0].search(np.ascontiguousarray(qviews[0][:, 0]), 10)
    f2 = time.perf_counter()
    t["faiss anchors"], t["faiss top-10"] = f1 - f0, f2 - f1
    # torch top-k for the anchor searches (same embeddings)
    tidx = [FlatIndex(g, "torch") for g in galleries]
    g0 = time.perf_counter()
    for ix, a in zip(tidx, anchors):
        ix.search(a, topk)
    t["torch anchors"] = time.perf_counter() - g0
    return t


def old_path_run(size: int, n_queries: int, topk: int, seed: int) -> float:
    """Before issue 13: every one of the 18 branches searched over the gallery, then a per-query fusion loop."""
    rng = np.random.default_rng(seed)
    galleries = [unit(rng, size, DIM) for _ in BACKBONES]
    qviews = [unit(rng, n_queries, len(VIEWS), DIM) for _ in BACKBONES]
    present = np.ones((n_queries, len(VIEWS)), bool)
    indexes = [FlatIndex(g, "faiss") for g in galleries]
    t0 = time.perf_counter()
    ids = np.stack([search_branches(ix, qv, present, topk)[1] for ix, qv in zip(indexes, qviews)])
    fuse_all_slow(ids, galleries, qviews, present, FusionConfig(WEIGHTS, agreement_depth=topk), 10)
    return time.perf_counter() - t0


STEPS = ("parse", "MiniLM", "text towers", "search", "facets", "fusion")
BF16 = ("bfloat16", "bfloat16_weights")


def cpu_info() -> tuple[str, set[str]]:
    """(model name, flags) from /proc/cpuinfo (empty where it is not readable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU", set()
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "unknown CPU")
    flags = next((set(ln.split(":", 1)[1].split()) for ln in text.splitlines() if ln.startswith("flags")), set())
    return name, flags


def native_bf16(flags: set[str]) -> bool:
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: |a ∩ b| / |b| over the non-negative ids (−1 = padding)."""
    out = np.empty(len(a))
    for i, (x, y) in enumerate(zip(a, b)):
        x, y = x[x >= 0], y[y >= 0]
        out[i] = len(np.intersect1d(x, y)) / max(len(y), 1)
    return out


def cosines(enc: QueryEncoder, ref: QueryEncoder) -> np.ndarray:
    """Cosine between two encoders' embeddings of every view text both hold (both L2-normalised)."""
    common = sorted(set(enc.cache) & set(ref.cache))
    return np.array([float(enc.cache[t] @ ref.cache[t]) for t in common])


def agreement(run: dict, ref: dict) -> dict:
    """Agreement of one stage-1 run with the float32 run on the same queries and gallery."""
    c = cosines(run["encoder"], ref["encoder"])
    return {"cos_min": float(c.min()), "cos_mean": float(c.mean()), "n_texts": len(c),
            "pool_overlap": float(overlap(run["pool"], ref["pool"]).mean()),
            "top10_overlap": float(overlap(run["top10"], ref["top10"]).mean()),
            "top1_same": float((run["top10"][:, 0] == ref["top10"][:, 0]).mean())}


def caption_gallery_agreement(minilm, precisions: list[str], n_queries: int, n_distractors: int, topk: int,
                              batch_size: int, seed: int = 2026) -> dict[str, dict]:
    """Stage 1 on a gallery with the track's structure: each query spec's target is a paraphrase of
    its caption, its distractors captions of single-attribute edits; the gallery is embedded from the
    captions' full view in float32 through the same (untrained) towers. Per precision: the fused
    top-10, the pools, R@1 / R@10 of the target, and agreement with float32."""
    rng = np.random.default_rng(seed)
    specs = [random_spec(rng) for _ in range(n_queries)]
    queries = [caption(s.person, rng, 0.1, s.light, s.weather, s.landmark) for s in specs]
    gallery_caps, target = [], np.empty(n_queries, dtype=np.int64)
    for i, s in enumerate(specs):
        target[i] = len(gallery_caps)
        gallery_caps.append(caption(s.person, rng, 0.1, s.light, s.weather, s.landmark))  # a paraphrase
        edits = single_edits(s)
        for j in rng.choice(len(edits), size=min(n_distractors, len(edits)), replace=False):
            e = edits[int(j)][1]
            gallery_caps.append(caption(e.person, rng, 0.1, e.light, e.weather, e.landmark))
    tw = towers()
    g_emb = encode_texts(gallery_caps, batch_size, minilm, "float32")  # the gallery: offline, float32
    galleries = [tower(g_emb) for tower in tw]
    cfg = FusionConfig(WEIGHTS, agreement_depth=topk)
    stage1 = Stage1(galleries, cfg, min(topk, len(gallery_caps)), "torch")
    out = {}
    for p in precisions:
        enc = QueryEncoder(tw, model=minilm, batch_size=batch_size, precision=p)
        qv, present = enc.encode(queries)
        pool = stage1.pool(qv, present)
        top10, _ = stage1.fuse(pool, qv, present, 10)
        hit = top10 == target[:, None]
        out[p] = {"encoder": enc, "pool": pool, "top10": top10, "R@1": float(hit[:, 0].mean()),
                  "R@10": float(hit.any(1).mean())}
    agree = {p: agreement(out[p], out["float32"]) for p in precisions}
    for p in precisions:
        out[p].update(agree[p])
    out["_gallery"] = len(gallery_caps)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--old-queries", type=int, default=60)
    ap.add_argument("--topk", type=int, default=100, help="candidates per anchor branch (params: retrieval.branch_topk)")
    ap.add_argument("--precisions", default=None,
                    help="MiniLM precisions to time, comma-separated (default: float32, int8_dynamic, int8_smooth, "
                         "and the bfloat16 ones where the CPU has native bf16)")
    ap.add_argument("--precision", choices=("auto", *PRECISIONS), default="auto",
                    help="the headline column's MiniLM precision; auto: the fastest that agrees with float32")
    ap.add_argument("--min-cosine", type=float, default=0.99, help="auto headline: mean cosine to float32 at least this")
    ap.add_argument("--min-top10", type=float, default=0.95,
                    help="auto headline: mean fused top-10 overlap with float32 on the caption gallery at least this")
    ap.add_argument("--agree-queries", type=int, default=400, help="caption-gallery queries (gallery: × (1 + distractors))")
    ap.add_argument("--agree-distractors", type=int, default=9)
    ap.add_argument("--batch-size", type=int, default=64, help="MiniLM texts per forward pass (params: text.batch_size)")
    ap.add_argument("--repeats", type=int, default=3, help="cold end-to-end runs per precision and row; the median one is reported")
    ap.add_argument("--write", action="store_true", help=f"also write {OUT} (the committed result)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import faiss

    cpu, flags = cpu_info()
    if args.precisions:
        precs = args.precisions.split(",")
        bad = [p for p in precs if p not in PRECISIONS]
        if bad:
            ap.error(f"--precisions: {bad} not in {PRECISIONS}")
    else:
        precs = ["float32", "int8_dynamic", "int8_smooth"] + (list(BF16) if native_bf16(flags) else [])
    precs = ["float32"] + [p for p in precs if p != "float32"]  # the reference of every agreement
    if args.precision not in ("auto", *precs):
        precs.append(args.precision)
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(s) for s in args.threads.split(",")]
    started, load_before = time.perf_counter(), Path("/proc/loadavg").read_text().strip()
    minilm = load_minilm()
    q = args.queries

    # agreement on the caption gallery (threads: the most asked for), once
    th_max = max(threads)
    torch.set_num_threads(th_max)
    with threadpool_limits(th_max):
        la_agree = load1()
        cap = caption_gallery_agreement(minilm, precs, args.agree_queries, args.agree_distractors, args.topk,
                                        args.batch_size)
    passes = {p: p == "float32" or (cap[p]["cos_mean"] >= args.min_cosine and cap[p]["top10_overlap"] >= args.min_top10)
              for p in precs}
    agree_rows = [
        f"| {p} | {cap[p]['cos_min']:.4f} / {cap[p]['cos_mean']:.4f} ({cap[p]['n_texts']}) | {cap[p]['pool_overlap']:.3f} "
        f"| {cap[p]['top10_overlap']:.3f} | {cap[p]['top1_same']:.3f} | {cap[p]['R@1']:.3f} / {cap[p]['R@10']:.3f} "
        f"| {'yes' if passes[p] else 'no'} |" for p in precs]
    for r in agree_rows:
        print(r, flush=True)

    main_rows, split_rows, rand_rows = [], [], []
    for size in sizes:
        for th in threads:
            torch.set_num_threads(th)
            faiss.omp_set_num_threads(th)
            with threadpool_limits(th):
                for i, p in enumerate(precs):  # warm-up: allocations, kernels, the int8 / bf16 copies built
                    stage1_run(size, 50, args.topk, minilm, 99 - i, p, args.batch_size, extras=False)
                la = load1()
                runs = {p: [stage1_run(size, q, args.topk, minilm, size + th + 104729 * r, p, args.batch_size,
                                       extras=p == "float32") for r in range(args.repeats)] for p in precs}
                med = {p: sorted(rs, key=lambda x: x["total"])[len(rs) // 2] for p, rs in runs.items()}
                if args.precision == "auto":
                    head = min((p for p in precs if passes[p]), key=lambda p: med[p]["total"])
                else:
                    head = args.precision
                t, t32 = med[head], med["float32"]
                tf = stage1_run(size, q, args.topk, minilm, size + th, head, args.batch_size, engine="faiss", extras=False)
                # steady state: new queries through the encoder whose cache holds an earlier batch's texts
                tw = stage1_run(size, q, args.topk, minilm, size + th + 7919, head, args.batch_size, extras=False,
                                enc=runs[head][0]["encoder"])
                old = old_path_run(size, args.old_queries, args.topk, seed=1)
                lb = load1()
            no_text = t["total"] - t["parse"] - t["MiniLM"]
            main_rows.append(
                f"| {size:,} | {th} | **{q / t['total']:,.0f}** ({head}) | "
                + " | ".join(f"{q / med[p]['total']:,.0f}" for p in precs)
                + f" | {q / tf['total']:,.0f} | {q / tw['total']:,.0f} ({tw['texts_per_query']:.2f}) "
                f"| {q / no_text:,.0f} | {q / t32['faiss anchors']:,.0f} | {q / t32['torch anchors']:,.0f} "
                f"| {q / t32['faiss top-10']:,.0f} | {args.old_queries / old:,.0f} | {t['mean_pool']:.0f} "
                f"| {t['texts_per_query']:.2f} | {la} → {lb} |")
            split_rows.append(f"| {size:,} | {th} | {head} | " + " | ".join(
                f"{1000 * t[k] / q:.2f} ({100 * t[k] / t['total']:.0f} %)" for k in STEPS)
                + f" | {1000 * t['total'] / q:.2f} | " + " | ".join(f"{1000 * med[p]['MiniLM'] / q:.2f}" for p in precs)
                + f" | {lb} |")
            for p in precs[1:]:
                a = agreement(runs[p][0], runs["float32"][0])  # r = 0: the same queries and gallery
                rand_rows.append(f"| {size:,} | {th} | {p} | {a['cos_min']:.4f} / {a['cos_mean']:.4f} ({a['n_texts']}) "
                                 f"| {a['pool_overlap']:.3f} | {a['top10_overlap']:.3f} | {a['top1_same']:.3f} |")
            print(main_rows[-1], flush=True)
    wall = time.perf_counter() - started
    rule = (f"the fastest precision with mean cosine ≥ {args.min_cosine} and mean top-10 overlap ≥ {args.min_top10} "
            "to float32 on the caption gallery (float32 always qualifies)" if args.precision == "auto"
            else f"MiniLM {args.precision} (chosen by --precision)")
    wanted = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags]
    lines = [
        "# person_search stage-1 benchmark",
        "",
        f"`PYTHONPATH=$PWD python benchmarks/person_search_index.py --write` — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.node()}, {cpu}, {os.cpu_count()} CPUs ({', '.join(wanted) or 'no AVX2'}; torch kernels "
        f"{torch.backends.cpu.get_cpu_capability()}, quantized engine {torch.backends.quantized.engine}), "
        f"{q} queries per run (old path: {args.old_queries}), top-{args.topk} per anchor branch, 3 backbones × 6 views, "
        f"embeddings {DIM}-d, MiniLM in batches of {args.batch_size} texts; every precision: the median of "
        f"{args.repeats} cold runs; wall {wall:.0f} s.",
        f"Load average before: {load_before.split(' ')[:3]}; after: {Path('/proc/loadavg').read_text().split()[:3]}. "
        "A load above the core count means the figures are slowed by other work on the machine.",
        "",
        f"Agreement with float32 on the caption gallery ({cap['_gallery']:,} items: {args.agree_queries} targets, each a "
        f"paraphrase of its query's caption, + {args.agree_distractors} single-attribute edits each, embedded from "
        f"their captions in float32), {args.agree_queries} queries, {th_max} thread(s), load {la_agree}. Cosine: MiniLM "
        "embeddings of the queries' view texts (min / mean, texts); overlaps: mean share of float32's top-K pool / "
        "fused top-10 also in the precision's; R@k: the target in the fused top k. Headline: " + rule + ".",
        "",
        "| MiniLM precision | cosine to float32 min / mean (texts) | top-K pool overlap | fused top-10 overlap "
        "| same top-1 | R@1 / R@10 | headline allowed |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
        *agree_rows,
        "",
        "Queries/s (load = 1-min load average before → after the row). End to end = query text → parse → MiniLM "
        "→ text towers → anchor search → pool → facets → fusion.",
        "",
        "| gallery | threads | stage 1 end to end (headline MiniLM, torch top-k) | "
        + " | ".join(f"same, MiniLM {p}" for p in precs)
        + " | headline, faiss flat anchors | headline, cache warmed by one earlier batch (MiniLM texts / query) "
        "| without parse + MiniLM | faiss flat, 6 anchor top-K | torch top-k, 6 anchors "
        "| faiss flat, one top-10 | old path (18 branches + loop) | mean pool | MiniLM texts / query | load |",
        "| ---: | ---: | ---: | " + " | ".join("---:" for _ in precs) + " | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *main_rows,
        "",
        "Where the time goes in the headline run: ms per query (share of the end-to-end time); search = the 6 anchor "
        "top-K + pool; facets = 18 branches scored on the pool. Then MiniLM ms per query of every precision.",
        "",
        "| gallery | threads | headline | parse | MiniLM | text towers | search | facets | fusion | total | "
        + " | ".join(f"MiniLM {p}" for p in precs) + " | load after |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in precs) + " | --- |",
        *split_rows,
        "",
        "Agreement with float32 on the timing runs' random gallery (the same queries and gallery; no structure: "
        "the top-10 are near-ties, the harshest case).",
        "",
        "| gallery | threads | MiniLM precision | cosine min / mean (texts) | top-K pool overlap | fused top-10 overlap | same top-1 |",
        "| ---: | ---: | --- | --- | ---: | ---: | ---: |",
        *rand_rows,
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
