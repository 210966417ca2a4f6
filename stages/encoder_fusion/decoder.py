"""Stage encoder_fusion_decoder: a report decoder (``core.lm`` with a visual prefix) per fusion × seed on the
cached encoder tokens, greedy reports of every test case, and their RoI-scorer decomposition against the
case's reference report (matched / missed / hallucinated findings, RoI score, RoI-weighted F1).

Training reports are realised from each case's findings at ``decoder.paraphrase_rate``; the test references
at ``panel.paraphrase_rate`` from their own seed (the same rate as the panel study's references). The
finding tagger is the panel stage's (same annotated set, same seed), retrained here (a second or two).

Decoder seed i reads the cached tokens of encoder draw ``head.seeds[i]`` (``encoder_fusion_encoders@<draw>``,
``params.encoder_draws``), so the claims' clusters are independent draws of encoders and decoder together."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log
from paperworks.core.lm import save_tokenizer, train_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import DECODER, draw_tokens, read_world
from paperworks.encoder_fusion.decoder import (ReportDecoder, encode_reports, generate_reports, lm_config, roi_f1,
                                               train_decoder)
from paperworks.encoder_fusion.params import Params, encoder_draws
from paperworks.encoder_fusion.reports import FindingTagger, annotated_sentences, realise, score

REPORT_SCHEMA = pa.schema([("fusion", pa.string()), ("seed", pa.int64()), ("case_id", pa.string()), ("modality", pa.string()),
                           ("roi", pa.string()), ("reference", pa.string()), ("report", pa.string()),
                           ("n_matched", pa.int64()), ("n_missed", pa.int64()), ("n_hallucinated", pa.int64()),
                           ("roi_score", pa.float64()), ("roi_f1", pa.float64())])
N_EXAMPLES = 3


def _f(f) -> dict:
    return {"region": f.region, "type": f.type, "size": f.size}


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    draws = encoder_draws(p, "decoder")  # decoder seed i reads encoder draw head.seeds[i] (ParamsError if too few)
    seed = global_seed(read_params_file())
    cases, _, _ = read_world()
    tokens = draw_tokens(draws[0])  # the shapes (grid, widths) every draw shares; seed 0's tokens
    d = p.decoder
    split_rows = {s: np.array([i for i, c in enumerate(cases) if c.split == s]) for s in ("train", "dev", "test")}
    texts = {}
    for s in ("train", "dev"):
        texts[s] = [realise(cases[i].findings, cases[i].modality, np.random.default_rng(derive_seed(seed, "encoder_fusion", "decoder_report", cases[i].case_id)),
                            d.paraphrase_rate) for i in split_rows[s]]
    test = [cases[i] for i in split_rows["test"]]
    references = [realise(c.findings, c.modality, np.random.default_rng(derive_seed(seed, "encoder_fusion", "decoder_reference", c.case_id)),
                          p.panel.paraphrase_rate) for c in test]
    tokenizer = train_tokenizer(texts["train"], vocab_size=d.vocab_size)
    enc = {s: encode_reports(tokenizer, texts[s]) for s in ("train", "dev")}
    max_len = max(int(m.sum(1).max()) for _, m in enc.values())
    grid = int(round(tokens["foundation"].shape[1] ** 0.5))
    cfg = lm_config(d, grid * grid, max_len)
    dims = {k: tokens[k].shape[2] for k in ("foundation", "xray", "path")}
    # the panel's tagger: same annotated set, same seed
    tagger = FindingTagger().fit(*annotated_sentences(p.panel.tagger_sentences, derive_seed(seed, "encoder_fusion", "tagger")))
    held_texts, held_labels = annotated_sentences(500, derive_seed(seed, "encoder_fusion", "tagger_heldout"), paraphrase_rate=1.0)
    tagger_acc = tagger.field_accuracy(held_texts, held_labels)
    rows, histories, cost, examples = [], {}, {}, []
    for s in range(d.seeds):
        if s:
            tokens = draw_tokens(draws[s], like=tokens)  # this seed's own encoder draw
        run_seed = derive_seed(seed, "encoder_fusion", "decoder", s)
        for fusion in p.head.fusions:
            t0 = time.process_time()
            model = ReportDecoder(fusion, dims, tokens["question_embeddings"].shape[1], grid, p.head, cfg, len(tokenizer), run_seed)
            hist = train_decoder(model, tokens, (split_rows["train"], *enc["train"]), (split_rows["dev"], *enc["dev"]), d, run_seed)
            t1 = time.process_time()
            reports = generate_reports(model, tokenizer, tokens, split_rows["test"], d.max_new_tokens)
            cost[f"{fusion}-{s}"] = {"train_s": t1 - t0, "generate_s": time.process_time() - t1, "steps": d.steps}
            histories[f"{fusion}-{s}"] = hist
            for k, (c, ref, rep) in enumerate(zip(test, references, reports)):
                sc = score(rep, ref, c.roi, tagger, p.panel.metric_roi_weight)
                rows.append({"fusion": fusion, "seed": s, "case_id": c.case_id, "modality": c.modality, "roi": c.roi,
                             "reference": ref, "report": rep, "n_matched": len(sc.matched), "n_missed": len(sc.missed),
                             "n_hallucinated": len(sc.hallucinated), "roi_score": sc.score,
                             "roi_f1": roi_f1(sc, c.roi, p.panel.metric_roi_weight)})
                if s == 0 and k < N_EXAMPLES:
                    examples.append({"case_id": c.case_id, "roi": c.roi, "system": fusion, "report": rep, "reference": ref,
                                     "matched": [_f(f) for f in sc.matched], "missed": [_f(f) for f in sc.missed],
                                     "hallucinated": [_f(f) for f in sc.hallucinated], "roi_score": sc.score,
                                     "roi_f1": rows[-1]["roi_f1"]})
            sel = next(r for r in hist if r["selected"])
            got = pd.DataFrame(rows[-len(test):])
            print(f"decoder {fusion} seed {s} (encoders of seed {draws[s]}): dev loss {hist[0]['dev_loss']:.3f} → {sel['dev_loss']:.3f} (step {sel['step']}), "
                  f"test RoI-F1 {got['roi_f1'].mean():.3f}, {cost[f'{fusion}-{s}']['train_s']:.1f} CPU-s")
    with atomic_path(DECODER) as tmp:
        write_parquet(tmp / "reports.parquet", pd.DataFrame(rows), REPORT_SCHEMA)
        write_json(tmp / "histories.json", histories)
        write_json(tmp / "examples.json", examples)
        write_json(tmp / "decoder.json", {"tagger_heldout_field_accuracy": tagger_acc, "tagger_training_sentences": p.panel.tagger_sentences,
                                          "vocab": len(tokenizer), "prefix_tokens": grid * grid, "max_report_tokens": max_len,
                                          "encoder_seeds": {str(s): draw for s, draw in enumerate(draws)},
                                          "training_paraphrase_rate": d.paraphrase_rate, "reference_paraphrase_rate": p.panel.paraphrase_rate,
                                          "lm_config": cfg.model_dump()})
        save_tokenizer(tokenizer, tmp / "tokenizer.json")
    write_run_log("encoder_fusion_decoder", {"runs": len(histories), "process_s_per_run": cost})


if __name__ == "__main__":
    main()
