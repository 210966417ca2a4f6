"""insurance_retrieve: BM25 + MiniLM bi-encoder first stage, recall@k, reranking lists, data card."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from paperworks.core.io import read_parquet, write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import catalogue as cat
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths
from paperworks.insurance.crossencoder import metrics_schema, per_query_metrics
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    f = p.first_stage
    rng = seed_everything(derive_seed(global_seed(read_params_file()), "insurance", "retrieve"))
    procedures = read_parquet(paths.PROCEDURES, cat.PROCEDURES_SCHEMA)
    queries = read_parquet(paths.QUERIES, cat.QUERIES_SCHEMA)
    fs.check_texts(procedures, "procedure_id", "name", str(paths.PROCEDURES))
    fs.check_texts(queries, "query_id", "text", str(paths.QUERIES))
    grades = cat.grade_matrix(queries, procedures)

    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(paths.BACKBONE["general"]), device="cpu")
    encoder.max_seq_length = p.backbone.max_length
    docs, texts = procedures["name"].tolist(), queries["text"].tolist()
    bm25 = fs.bm25_scores(texts, docs)
    dense = fs.dense_scores(encoder, texts, docs)
    split = queries["split"].to_numpy()
    # the fusion is chosen on validation queries only; test queries never inform it
    val = split == "val"
    fusion, fusion_table = fs.choose_fusion(bm25[val], dense[val], grades[val], f.list_size, f.relevant_grade,
                                            f.rrf_ks, f.bm25_weights)
    w = fusion["bm25_weight"]
    fused = fs.rrf_scores(bm25, dense, k=fusion["rrf_k"], weights=(w, 1.0 - w))
    equal = fs.rrf_scores(bm25, dense, k=60)
    recall = {name: {"grade>=2": fs.recall_table(s, grades, f.recall_ks, 2), "grade3": fs.recall_table(s, grades, f.recall_ks, 3)}
              for name, s in (("bm25", bm25), ("bi_encoder", dense), ("rrf_equal_k60", equal), ("hybrid_tuned", fused))}
    recall_by_intent = {intent: fs.recall_table(fused[(queries["intent"] == intent).to_numpy()],
                                                grades[(queries["intent"] == intent).to_numpy()], f.recall_ks, 2)
                        for intent in cat.INTENTS}
    no_relevant = {s_: 1.0 - fs.hit_share(fused[split == s_], grades[split == s_], f.list_size, f.relevant_grade)
                   for s_ in ("train", "val", "test")}
    no_relevant_equal = {s_: 1.0 - fs.hit_share(equal[split == s_], grades[split == s_], f.list_size, f.relevant_grade)
                         for s_ in ("train", "val", "test")}

    lists, misses = fs.build_lists(queries, procedures, fused, grades, f.list_size, f.relevant_grade)
    kept = {}
    for split_name in ("train", "val", "test"):
        # every surviving list is used; a seeded shuffle only fixes the order
        part = lists[lists["split"] == split_name]
        part = part.iloc[rng.permutation(len(part))].reset_index(drop=True)
        if len(part) < 2:
            from paperworks.core.params import ParamsError
            raise ParamsError(f"insurance.first_stage: only {len(part)} '{split_name}' lists survive the first stage")
        fs.validate_lists(part, f"{split_name} lists", f.relevant_grade)
        write_parquet(paths.lists_file(split_name), part, fs.LISTS_SCHEMA)
        kept[split_name] = part
    test = kept["test"]
    ks = p.eval.ks
    write_parquet(paths.LISTS / "first_stage_test.parquet",
                  per_query_metrics(test, fs.first_stage_order_scores(test), ks), metrics_schema(ks))
    write_parquet(paths.LISTS / "random_test.parquet",
                  fs.random_order_metrics(test, ks, p.eval.random_shuffles, derive_seed(0, "insurance", "random")),
                  metrics_schema(ks))
    all_labels = np.concatenate([np.asarray(l) for part in kept.values() for l in part["labels"]])
    card = {
        "services": int(read_parquet(paths.SERVICES, cat.SERVICES_SCHEMA).shape[0]),
        "procedures": len(procedures), "queries": len(queries),
        "queries_per_intent": queries["intent"].value_counts().sort_index().to_dict(),
        "queries_per_split": queries["split"].value_counts().sort_index().to_dict(),
        "first_stage_misses": misses, "lists_total": len(lists),
        "lists_used": {s: len(v) for s, v in kept.items()},
        "list_length": {"min": int(min(len(d) for part in kept.values() for d in part["docs"])),
                        "max": int(max(len(d) for part in kept.values() for d in part["docs"]))},
        "relevance_histogram": {str(g): int((all_labels == g).sum()) for g in range(4)},
        "lists_per_intent_test": test["intent"].value_counts().sort_index().to_dict(),
    }
    write_json(paths.FIRST_STAGE, {"recall": recall, "recall_hybrid_by_intent": recall_by_intent, "data_card": card,
                                   "fusion": fusion, "fusion_table": fusion_table, "list_size": f.list_size,
                                   "share_without_relevant": no_relevant, "share_without_relevant_rrf_equal_k60": no_relevant_equal})
    log.info("first stage: fusion %s; share of queries without a relevant candidate %s (equal RRF k=60: %s)",
             fusion, no_relevant, no_relevant_equal)


if __name__ == "__main__":
    main()
