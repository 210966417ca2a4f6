"""Stage encoder_fusion_panel: the metric-agreement study (simulated systems, simulated raters).

The finding tagger is trained here on its own annotated sentences (a separate seed), checked on
held-out fully paraphrased sentences, then every metric scores every system's report against the
case's reference report; per case, each metric's Kendall τ with the panel (mean over raters)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.core.io import atomic_path, write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.core.vision.text import encode_texts
from paperworks.encoder_fusion.artifacts import PANEL, read_world
from paperworks.encoder_fusion.panel import SYSTEMS, agreement, simulate
from paperworks.encoder_fusion.params import Params
from paperworks.encoder_fusion.reports import FindingTagger, annotated_sentences, bleu, entity_f1, label_f1, rouge_l, score_findings

METRICS = ("roi", "entity_f1", "label_f1", "bleu", "rouge_l", "embedding")
TAU_SCHEMA = pa.schema([("case_id", pa.string()), ("modality", pa.string()), ("metric", pa.string()), ("tau", pa.float64())])


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    seed = global_seed(read_params_file())
    cases, _, _ = read_world()
    test = [c for c in cases if c.split == "test"]
    rng = np.random.default_rng(derive_seed(seed, "encoder_fusion", "panel_cases"))
    chosen = [test[i] for i in sorted(rng.choice(len(test), size=min(p.panel.n_cases, len(test)), replace=False))]
    tagger = FindingTagger().fit(*annotated_sentences(p.panel.tagger_sentences, derive_seed(seed, "encoder_fusion", "tagger")))
    held_texts, held_labels = annotated_sentences(500, derive_seed(seed, "encoder_fusion", "tagger_heldout"), paraphrase_rate=1.0)
    tagger_acc = tagger.field_accuracy(held_texts, held_labels)
    records, weights = simulate(chosen, p.panel, derive_seed(seed, "encoder_fusion", "panel"))
    systems = list(SYSTEMS)
    texts = [r["reference"] for r in records] + [r["systems"][s]["report"] for r in records for s in systems]
    emb = encode_texts(texts)
    ref_emb, sys_emb = emb[:len(records)], emb[len(records):].reshape(len(records), len(systems), -1)
    rows, examples = [], []
    for i, (case, rec) in enumerate(zip(chosen, records)):
        ref_f = tagger.extract(rec["reference"])
        scores = {m: [] for m in METRICS}
        for j, s in enumerate(systems):
            rep = rec["systems"][s]["report"]
            rep_f = tagger.extract(rep)
            roi = score_findings(rep_f, ref_f, case.roi, p.panel.metric_roi_weight)
            scores["roi"].append(roi.score)
            scores["entity_f1"].append(entity_f1(rep_f, ref_f))
            scores["label_f1"].append(label_f1(rep_f, ref_f))
            scores["bleu"].append(bleu(rep, rec["reference"]))
            scores["rouge_l"].append(rouge_l(rep, rec["reference"]))
            scores["embedding"].append(float(sys_emb[i, j] @ ref_emb[i]))
            if i < 3:
                examples.append({"case_id": case.case_id, "roi": case.roi, "system": s, "report": rep, "reference": rec["reference"],
                                 "matched": [f.__dict__ for f in roi.matched], "missed": [f.__dict__ for f in roi.missed],
                                 "hallucinated": [f.__dict__ for f in roi.hallucinated], "roi_score": roi.score,
                                 "mean_rater_utility": float(np.mean(rec["systems"][s]["utilities"]))})
        utilities = [rec["systems"][s]["utilities"] for s in systems]
        for m in METRICS:
            rows.append({"case_id": case.case_id, "modality": case.modality, "metric": m, "tau": agreement(scores[m], utilities)})
    df = pd.DataFrame(rows)
    with atomic_path(PANEL) as tmp:
        write_parquet(tmp / "tau.parquet", df, TAU_SCHEMA)
        write_json(tmp / "panel.json", {"simulated": True, "cases": len(chosen), "raters": p.panel.raters,
                                        "rater_roi_weights": [round(float(w), 3) for w in weights],
                                        "paraphrase_rate_reference": p.panel.paraphrase_rate,
                                        "systems": SYSTEMS, "tagger_heldout_field_accuracy": tagger_acc,
                                        "tagger_training_sentences": p.panel.tagger_sentences})
        write_json(tmp / "examples.json", examples)
    print(f"tagger held-out accuracy {tagger_acc:.3f}; mean τ: " + ", ".join(f"{m} {g:.3f}" for m, g in df.groupby("metric")["tau"].mean().items()))


if __name__ == "__main__":
    main()
