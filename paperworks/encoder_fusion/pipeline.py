"""Glue between the world, the cached tokens and the models: the question table, the small-lesion
detection probe (precondition), and one (fusion, seed) VQA run."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from paperworks.encoder_fusion.models import FusionVQA, build_fusion, predict, train_fusion
from paperworks.encoder_fusion.params import MODALITIES, HeadParams
from paperworks.encoder_fusion.world import ANSWERS, REGIONS, Case, questions


def question_table(cases: list[Case]) -> tuple[list[str], pd.DataFrame]:
    """Every question of every case: (distinct question texts, one row per question with ``qid`` into them)."""
    rows = []
    for i, c in enumerate(cases):
        for q in questions(c):
            rows.append({"row": i, "split": c.split, **q})
    df = pd.DataFrame(rows)
    texts = sorted(df["text"].unique())
    df["qid"] = df["text"].map({t: k for k, t in enumerate(texts)})
    df["key"] = df["case_id"] + "|" + df["qtype"] + "|" + df["region"]
    return texts, df


def region_features(tokens: torch.Tensor, region: int) -> np.ndarray:
    """Mean and max over the region's cells of an N × g² × C grid (regions: 2 × 2 quadrants)."""
    g = int(round(tokens.shape[1] ** 0.5))
    ry, rx = divmod(region, 2)
    cells = [y * g + x for y in range(g) for x in range(g) if y * 2 // g == ry and x * 2 // g == rx]
    t = tokens[:, cells]
    return torch.cat([t.mean(1), t.amax(1)], dim=1).numpy()


def detection_probe(cases: list[Case], tokens: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Small-lesion detection per modality: a logistic probe on region-pooled frozen tokens (train cases)
    tells a region with a small lesion from a region with none; balanced accuracy on the test cases.
    The same probe on the foundation's tokens and on the modality's specialist's tokens."""
    out = {}
    for m in MODALITIES:
        feats: dict[str, dict[str, list]] = {}
        for enc in ("foundation", m):
            xs = {"train": [], "test": []}
            ys = {"train": [], "test": []}
            for r, name in enumerate(REGIONS[m]):
                x = region_features(tokens[enc], r)
                for i, c in enumerate(cases):
                    if c.modality != m or c.split not in xs:
                        continue
                    f = {f.region: f for f in c.findings}.get(name)
                    if f is not None and f.size != "small":
                        continue  # large lesions are visible to both: not what the precondition measures
                    xs[c.split].append(x[i])
                    ys[c.split].append(int(f is not None))
            feats[enc] = {"x": xs, "y": ys}
        scores = {}
        for enc, label in (("foundation", "foundation"), (m, "specialist")):
            d = feats[enc]
            if len(set(d["y"]["train"])) < 2 or len(set(d["y"]["test"])) < 2:
                scores[label] = float("nan")
                continue
            clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0))
            clf.fit(np.asarray(d["x"]["train"]), d["y"]["train"])
            scores[label] = float(balanced_accuracy_score(d["y"]["test"], clf.predict(np.asarray(d["x"]["test"]))))
        scores["n_test_regions"] = len(feats["foundation"]["y"]["test"])
        scores["n_test_small"] = int(sum(feats["foundation"]["y"]["test"]))
        out[m] = scores
    return out


def split_arrays(qdf: pd.DataFrame, split: str) -> dict[str, np.ndarray]:
    d = qdf[qdf["split"] == split]
    return {"row": d["row"].to_numpy(), "qid": d["qid"].to_numpy(), "answer": d["answer"].to_numpy()}


def run_fusion(fusion: str, seed_index: int, seed: int, tokens: dict[str, torch.Tensor], qdf: pd.DataFrame,
               p: HeadParams) -> tuple[pd.DataFrame, list[dict], FusionVQA]:
    """Train one fusion + head from ``seed``; return its test predictions, its dev curve and the model (at the
    checkpoint in use)."""
    enc = {k: tokens[k] for k in ("foundation", "xray", "path")}
    qemb = tokens["question_embeddings"]
    grid = int(round(enc["foundation"].shape[1] ** 0.5))
    dims = {k: v.shape[2] for k, v in enc.items()}
    model = build_fusion(fusion, dims, qemb.shape[1], grid, p, seed)
    history = train_fusion(model, enc, qemb, split_arrays(qdf, "train"), split_arrays(qdf, "dev"), p, seed)
    test = qdf[qdf["split"] == "test"]
    logits = predict(model, enc, qemb, test["row"].to_numpy(), test["qid"].to_numpy())
    pred = logits.argmax(1).numpy()
    out = pd.DataFrame({"fusion": fusion, "seed": seed_index, "key": test["key"].to_numpy(), "case_id": test["case_id"].to_numpy(),
                        "modality": test["modality"].to_numpy(), "qtype": test["qtype"].to_numpy(),
                        "region": test["region"].to_numpy(), "small": test["small"].to_numpy(),
                        "answer": test["answer"].to_numpy(), "pred": pred})
    out["correct"] = (out["answer"] == out["pred"]).astype(float)
    out["pred_text"] = [ANSWERS[k] for k in pred]
    return out, history, model
