"""Insurance track: reranking throughput, first-stage latency, peak memory of stage workloads.

    python benchmarks/insurance_throughput.py [--pairs 512] [--queries 200] [--threads 2] [--memory quick|all|none]

Prints three tables:
1. cross-encoder reranking throughput (query–candidate pairs/s) of the trained model
   (``models/insurance/best_cross_encoder`` when the pipeline has run, else MiniLM with a
   fresh head — same architecture and cost) at several batch sizes;
2. first-stage latency per query (BM25, bi-encoder, fusion) over the procedure catalogue;
3. peak resident memory of insurance stages run at the profile in ``params.yaml``, each
   in a throw-away copy of the repository (needs the pipeline's outputs there).
   ``quick`` (default) runs generate, retrieve, zeroshot, one grid config and evaluate;
   ``all`` adds backbones (MLM), tune and seeds — a whole default run (~20 min on 2 cores).
Tests never assert on these numbers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n## {title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(fmt.format(*r))


def catalogue(n_queries: int):
    """The pipeline's catalogue if present, else a freshly generated one at the paper's scale."""
    from paperworks.core.io import read_parquet
    from paperworks.insurance import catalogue as cat
    from paperworks.insurance import paths

    if (REPO / paths.PROCEDURES).exists() and (REPO / paths.QUERIES).exists():
        procs = read_parquet(REPO / paths.PROCEDURES, cat.PROCEDURES_SCHEMA)
        queries = read_parquet(REPO / paths.QUERIES, cat.QUERIES_SCHEMA)
        return procs["name"].tolist(), queries["text"].tolist()[:n_queries], "pipeline catalogue"
    import numpy as np

    rng = np.random.default_rng(0)
    services, procs = cat.build_catalogue(708, (2, 4), (0.7, 0.1, 0.2), rng)
    queries = cat.generate_queries(services, procs, n_queries, {"direct": 0.34, "symptom": 0.33, "coverage": 0.33},
                                   0.05, 0.15, rng)
    return procs["name"].tolist(), queries["text"].tolist(), "generated catalogue (paper scale)"


def bench_rerank(n_pairs: int, docs: list[str], queries: list[str]) -> None:
    from paperworks.insurance import backbone as bb
    from paperworks.insurance import crossencoder as ce
    from paperworks.insurance import paths

    trained = REPO / paths.BEST_MODEL
    path, what = (trained, "trained best_cross_encoder") if trained.is_dir() else (bb.minilm_path(), "MiniLM-L6 + fresh head")
    model = ce.load_cross_encoder(path, 48, seed=0)
    what += f" ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params)"
    pairs = [(queries[i % len(queries)], docs[(7 * i) % len(docs)]) for i in range(n_pairs)]
    model.predict(pairs[:32], batch_size=32, show_progress_bar=False)  # warm-up
    rows = []
    for bs in (16, 32, 64):
        t0 = time.perf_counter()
        model.predict(pairs, batch_size=bs, show_progress_bar=False)
        dt = time.perf_counter() - t0
        rows.append([what, bs, n_pairs, f"{dt:.2f}", f"{n_pairs / dt:.0f}"])
    table("Cross-encoder reranking throughput", ["model", "batch", "pairs", "seconds", "pairs/s"], rows)


def bench_first_stage(docs: list[str], queries: list[str], source: str) -> None:
    import numpy as np
    from rank_bm25 import BM25Okapi
    from sentence_transformers import SentenceTransformer

    from paperworks.insurance import backbone as bb
    from paperworks.insurance import first_stage as fs

    bm25 = BM25Okapi([fs.tokenize(d) for d in docs])
    t0 = time.perf_counter()
    bm = np.stack([bm25.get_scores(fs.tokenize(q)) for q in queries])
    t_bm25 = (time.perf_counter() - t0) / len(queries)
    enc = SentenceTransformer(str(bb.minilm_path()), device="cpu")
    t0 = time.perf_counter()
    doc_emb = enc.encode(docs, batch_size=64, normalize_embeddings=True)
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    q_emb = enc.encode(queries, batch_size=64, normalize_embeddings=True)
    dense = q_emb @ doc_emb.T
    t_dense = (time.perf_counter() - t0) / len(queries)
    t0 = time.perf_counter()
    fused = fs.rrf_scores(bm, dense)
    np.argsort(-fused, axis=1)[:, :8]
    t_fuse = (time.perf_counter() - t0) / len(queries)
    t0 = time.perf_counter()
    for q in queries[:20]:  # one query at a time: the online latency
        qe = enc.encode([q], normalize_embeddings=True)
        s = fs.rrf_scores(bm25.get_scores(fs.tokenize(q))[None, :], qe @ doc_emb.T)
        np.argsort(-s[0])[:8]
    t_single = (time.perf_counter() - t0) / min(20, len(queries))
    rows = [["BM25 (rank_bm25)", f"{1000 * t_bm25:.2f}"], ["bi-encoder (batched queries)", f"{1000 * t_dense:.2f}"],
            ["RRF fusion + top-k", f"{1000 * t_fuse:.3f}"], ["hybrid, one query at a time", f"{1000 * t_single:.2f}"]]
    table(f"First-stage latency per query ({len(docs)} procedures, {source}; doc index built in {t_index:.1f} s)",
          ["retriever", "ms/query"], rows)


STAGES = {
    "quick": ["generate", "retrieve", "zeroshot", "train --backbone domain --loss listnet --freeze none", "evaluate"],
    "all": ["generate", "backbones", "retrieve", "zeroshot", "train --backbone domain --loss listnet --freeze none",
            "tune", "seeds", "evaluate"],
}


PEAK_RSS_WRAPPER = """
import atexit, re, runpy, sys
out, module = sys.argv[1], sys.argv[2]

def report():
    hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
    open(out, "w").write(hwm)

atexit.register(report)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def bench_memory(threads: int, which: str) -> None:
    """Run each stage's command in a temporary copy of the repo (outputs there only); peak RSS is each stage's own VmHWM."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(REPO, work, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", ".dvc"), symlinks=False)
        shutil.rmtree(work / "data/insurance/optuna", ignore_errors=True)  # never touch the real study
        env = dict(os.environ, PAPERWORKS_THREADS=str(threads), PYTHONPATH=str(work))
        for stage in STAGES[which]:
            t0 = time.perf_counter()
            # the stage reports its own VmHWM at exit: the peak of its own address space, which a
            # parent's wait4 cannot give (Linux folds the pre-exec pages of a forked parent into it)
            rss_file = Path(tmp) / "rss.txt"
            rss_file.unlink(missing_ok=True)
            cmd = [sys.executable, "-c", PEAK_RSS_WRAPPER, str(rss_file), f"stages.insurance.{stage.split()[0]}", *stage.split()[1:]]
            proc = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            ok = proc.returncode == 0
            err = proc.stderr.decode()[-300:]
            peak_kib = int(rss_file.read_text()) if rss_file.exists() else 0
            rows.append([stage.split(" --")[0] if "train" not in stage else "train (1 config)",
                         f"{peak_kib / 1024:.0f}", f"{time.perf_counter() - t0:.0f}", "ok" if ok else f"failed: {err}"])
            if not ok:
                break
    table("Peak memory per insurance stage (params.yaml profile)", ["stage", "peak RSS MiB", "seconds", "status"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=512)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("PAPERWORKS_THREADS", os.cpu_count() or 1)))
    ap.add_argument("--memory", choices=["quick", "all", "none"], default="quick")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"insurance benchmarks: torch threads {args.threads}, {os.cpu_count()} CPUs")
    if args.memory != "none":
        bench_memory(args.threads, args.memory)
    docs, queries, source = catalogue(args.queries)
    bench_rerank(args.pairs, docs, queries)
    bench_first_stage(docs, queries, source)


if __name__ == "__main__":
    main()
