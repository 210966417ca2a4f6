"""Stage-1 / stage-2 speed and memory at the full PAB gallery size (36,773 images), 2 cores.

Measured here, printed as a table:
- index build time and top-k query throughput, numpy vs faiss (IndexFlatIP), side by side;
- stage 1 end to end: every backbone × view branch searched + anchor-constrained fusion, queries/s;
- rerank latency per query (three experts over a 10-image pool);
- image-tower throughput and peak memory when embedding the whole 36,773-image gallery.

The gallery/query embeddings are *random unit vectors of the right shape* (36,773 × 128) and
the images random uint8 arrays: throughput and memory do not depend on what the vectors
encode, and this keeps the benchmark independent of any trained artifact.

Run: ``python benchmarks/person_search_index.py [--threads 2] [--queries 500]``.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from paperworks.person_search.experts import ClozeExpert, CrossReranker, FacetVerifier, score_cloze, score_cross, score_verify
from paperworks.person_search.fusion import FusionConfig, fuse_all
from paperworks.person_search.retrieval import FlatIndex, search_branches
from paperworks.person_search.text import VIEWS
from paperworks.person_search.towers import DualEncoder, embed_images, images_to_tensor

N_GALLERY = 1978 + 34795  # PAB: targets + distractors
DIM, H, W = 128, 64, 48
BACKBONES = ("cnn", "resnet", "vit")


def unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, repeat: int = 1):
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    return (time.perf_counter() - t0) / repeat, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--topk", type=int, default=100, help="candidates per branch (params: retrieval.branch_topk)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows: list[tuple[str, str, str]] = []

    gallery = unit(rng, N_GALLERY, DIM)
    queries = unit(rng, args.queries, DIM)
    for engine in ("numpy", "faiss"):
        build, index = timed(lambda: FlatIndex(gallery, engine))
        for k in (10, args.topk):
            secs, _ = timed(lambda: index.search(queries, k))
            rows.append((f"index {engine}", f"build {build * 1000:.0f} ms", f"top-{k}: {args.queries / secs:,.0f} queries/s"))

    # Stage 1 end to end: 3 backbones × 6 views, top-K each, then fusion (anchor, percentile, agreement).
    galleries = [unit(rng, N_GALLERY, DIM) for _ in BACKBONES]
    qviews = [unit(rng, args.queries, len(VIEWS), DIM) for _ in BACKBONES]
    present = np.ones((args.queries, len(VIEWS)), bool)
    present[::3, 4] = False  # some queries mention no object
    for engine in ("numpy", "faiss"):
        indexes = [FlatIndex(g, engine) for g in galleries]
        t_search, ids = timed(lambda: np.stack([search_branches(ix, qv, present, args.topk)[1] for ix, qv in zip(indexes, qviews)]))
        cfg = FusionConfig((1.0, 1.0, 0.5, 0.5, 0.5, 0.5))
        t_fuse, _ = timed(lambda: fuse_all(ids, galleries, qviews, present, cfg, 10))
        total = t_search + t_fuse
        rows.append((f"stage 1 ({engine})", f"{len(BACKBONES) * len(VIEWS)} branches + fusion",
                     f"{args.queries / total:,.0f} queries/s (search {1000 * t_search / args.queries:.2f} ms, "
                     f"fusion {1000 * t_fuse / args.queries:.2f} ms per query)"))

    # Stage 2: rerank latency per query (pool of 10), untrained experts of the default size.
    n_q, pool = 64, 10
    x = images_to_tensor(rng.integers(0, 256, (n_q * pool, H, W, 3), dtype=np.uint8)).view(n_q, pool, 3, H, W)
    tokens = torch.from_numpy(unit(rng, n_q, len(VIEWS), 384))
    pres = torch.ones(n_q, len(VIEWS), dtype=torch.bool)
    view_ids = np.tile(np.arange(len(VIEWS)), (n_q, 1))
    text_emb = unit(rng, len(VIEWS), 384)
    slots = [{"action": "falling", "object": "car", "upper": "red", "lower": "blue"}] * n_q
    cross, cloze, verify = CrossReranker(32, H, W).eval(), ClozeExpert(32, H, W).eval(), FacetVerifier(32, H, W).eval()
    for name, fn in (("cross", lambda: score_cross(cross, x, tokens, pres)), ("cloze", lambda: score_cloze(cloze, x, slots)),
                     ("verify", lambda: score_verify(verify, x, view_ids, text_emb))):
        secs, _ = timed(fn, repeat=2)
        rows.append((f"rerank {name}", f"pool {pool}", f"{1000 * secs / n_q:.2f} ms per query"))

    # Embedding the full-size gallery with one image tower (batches of 512) and peak memory.
    images = rng.integers(0, 256, (N_GALLERY, H, W, 3), dtype=np.uint8)
    for bb in BACKBONES:
        model = DualEncoder(bb, DIM, H, W).eval()
        secs, emb = timed(lambda: embed_images(model, images))
        rows.append((f"embed gallery ({bb})", f"{N_GALLERY:,} images", f"{N_GALLERY / secs:,.0f} images/s, {secs:.1f} s"))
    rows.append(("peak memory", "whole benchmark process", f"{peak_rss_mib():,.0f} MiB RSS"))

    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"person_search index benchmark — gallery {N_GALLERY:,} × {DIM}, {args.threads} threads, {args.queries} queries")
    print(f"{'what':<{w0}}  {'setting':<{w1}}  result")
    for a, b, c in rows:
        print(f"{a:<{w0}}  {b:<{w1}}  {c}")


if __name__ == "__main__":
    main()
