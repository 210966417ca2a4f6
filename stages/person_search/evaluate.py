"""Per training run: consensus fitted on validation queries, metrics for every method; over the runs: claims, contact sheet."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa

from paperworks.core.io import ArtifactError, atomic_path, load_safetensors, read_json, write_json, write_parquet
from paperworks.core.claims import claim_summary, evaluate_claims, evidence_block, live_curve, load_evidence, write_unit_tables
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.person_search import evaluate as ps_eval
from paperworks.person_search.artifacts import (
    CORPUS, DATA, FUSION, METRICS, PLOTS, RERANK, TEXT, live_curve_path, read_images, read_items, read_queries, run_dir,
)
from paperworks.person_search.data import blind_twins, coarse_targets
from paperworks.person_search.consensus import CONFIDENCE_KINDS, confidence, fit_consensus, softmax, view_agreement
from paperworks.person_search.evaluate import per_query_metrics, sheet_for_queries, summarise
from paperworks.person_search.experts import EXPERTS
from paperworks.person_search.params import Params
from paperworks.person_search.text import VIEWS

EVALUATION = DATA / "evaluation"
RESULT_SCHEMA = pa.schema([("method", pa.string()), ("split", pa.string()), ("seed", pa.string()), ("map@10", pa.float64()),
                           ("r@1", pa.float64()), ("r@5", pa.float64()), ("r@10", pa.float64()), ("n_queries", pa.int64())])


def reorder(pool: np.ndarray, order: np.ndarray) -> np.ndarray:
    return np.take_along_axis(pool, order, axis=1)


def evaluate_run(seed: int, p: Params, targets: np.ndarray, is_val: np.ndarray, twins: np.ndarray, coarse: np.ndarray) -> dict:
    """One training run: consensus fitted on its validation queries, every method's top-10, flips."""
    fusion_file, rerank_file = run_dir(FUSION, seed) / "rankings.safetensors", run_dir(RERANK, seed) / "expert_scores.safetensors"
    ranks = {k: v.numpy() for k, v in load_safetensors(fusion_file).items()}
    experts = {k: v.numpy() for k, v in load_safetensors(rerank_file).items()}
    pool = experts["pool"]
    if not np.array_equal(pool, ranks["fusion/ids"][:, : pool.shape[1]]):
        raise ArtifactError(f"{rerank_file}: pool does not match the current fusion output {fusion_file}")

    # ---- stage 2: consensus fitted on validation queries only
    scores = {"fusion": ranks["fusion/scores"][:, : pool.shape[1]].astype(np.float64)} | {e: experts[e].astype(np.float64) for e in EXPERTS}
    target_pos = np.array([int(np.flatnonzero(row == t)[0]) if (row == t).any() else -1 for row, t in zip(pool, targets)])
    # how many of the six single views (each over all backbones) put the fused top-1 first (the agreement confidence)
    agreement = view_agreement(pool[:, 0], np.stack([ranks[f"view_{v}/ids"][:, 0] for v in VIEWS], axis=1))
    cons = fit_consensus({k: v[is_val] for k, v in scores.items()}, target_pos[is_val], p.consensus.confidence, agreement[is_val])
    order, kept, _ = cons.combine(scores, agreement)
    always, _, _ = replace(cons, threshold=np.inf).combine(scores, agreement)  # the same experts and weights, no gate

    methods: dict[str, np.ndarray] = {}
    for key in ranks:
        if key.endswith("/ids"):
            methods[key[: -len("/ids")]] = ranks[key][:, :10]
    expert_orders = {e: np.argsort(-scores[e], axis=1, kind="stable") for e in EXPERTS}
    for e in EXPERTS:
        methods[f"fusion+{e}"] = reorder(pool, expert_orders[e])[:, :10]
    methods["fusion+consensus"] = reorder(pool, order)[:, :10]
    methods["fusion+always_rerank"] = reorder(pool, always)[:, :10]
    # how often reranking turns a correct stage-1 top-1 into a wrong one, per source (the gate's reason to exist)
    top1 = {e: expert_orders[e][:, 0] == target_pos for e in EXPERTS}
    top1 |= {"always_rerank": always[:, 0] == target_pos, "gated": order[:, 0] == target_pos}
    p_fusion = softmax(scores["fusion"] / cons.temperatures["fusion"])
    conf = cons.confidence(p_fusion, agreement)  # the gate's stage-1 confidence
    # does each candidate confidence tell stage 1's right top-1 from its wrong ones? (the gate's precondition, descriptive)
    separation = {split: ps_eval.confidence_separation(target_pos[mask] == 0, {k: confidence(p_fusion[mask], k, agreement[mask])
                                                                                 for k in CONFIDENCE_KINDS},
                                                    agreement[mask])
                  for split, mask in (("val", is_val), ("test", ~is_val))}
    top_quartile = conf >= np.quantile(conf[is_val], 0.75)
    blind_twin = twins >= 0
    flips = {split: ps_eval.rerank_flips(target_pos[mask] == 0, {k: v[mask] for k, v in top1.items()},
                                         target_pos[mask] >= 0, kept[mask], top_quartile[mask], blind_twin[mask], coarse[mask])
             for split, mask in (("val", is_val), ("test", ~is_val))}
    twin_pairs = {split: ps_eval.twin_order({k: v[mask] for k, v in scores.items()}, pool[mask], targets[mask], twins[mask])
                  for split, mask in (("val", is_val), ("test", ~is_val))}
    return {"separation": separation, "twin_pairs": twin_pairs, "methods": methods, "per_q": {m: per_query_metrics(ids, targets) for m, ids in methods.items()},
            "cons": cons, "kept": kept, "target_pos": target_pos, "flips": flips, "pool_size": pool.shape[1]}


@stage_main
def main() -> None:
    p = load_section("person_search", Params)
    ev = load_evidence()
    raw = read_params_file()
    queries = read_queries()
    corpus_card = read_json(CORPUS / "summary.json")
    targets = queries["target_item"].to_numpy()
    is_val, is_test = (queries["split"] == "val").to_numpy(), (queries["split"] == "test").to_numpy()
    if not is_val.any() or not is_test.any():
        raise ArtifactError("queries need both a 'val' and a 'test' split")
    gallery = read_items("gallery")
    # per query, the item id of its target's blind twin (a distractor differing only in the landmark), −1: none
    twin_of = blind_twins(gallery)
    twins = np.array([twin_of.get(int(f), -1) for f in gallery["family"].to_numpy()[targets]], dtype=np.int64)
    seeds = list(p.seeds)
    # queries whose distractors all agree with the target in every cloze slot (data.coarse_target_share)
    coarse_fams = coarse_targets(gallery)
    coarse = np.isin(gallery["family"].to_numpy()[targets], sorted(coarse_fams))
    runs = {s: evaluate_run(s, p, targets, is_val, twins, coarse) for s in seeds}
    method_names = sorted(runs[seeds[0]]["per_q"])

    rows = []
    for split, mask in (("test", is_test), ("val", is_val)):
        for m in method_names:
            per_seed = [summarise(runs[s]["per_q"][m], mask) for s in seeds]
            for s, r in zip(seeds, per_seed):
                rows.append({"method": m, "split": split, "seed": str(s), **r, "n_queries": int(mask.sum())})
            rows.append({"method": m, "split": split, "seed": "mean",
                         **{k: float(np.mean([r[k] for r in per_seed])) for k in per_seed[0]}, "n_queries": int(mask.sum())})
    table = pd.DataFrame(rows)
    write_parquet(EVALUATION / "results.parquet", table, RESULT_SCHEMA)
    per_query = pd.concat([pd.DataFrame({"seed": s, "query_id": queries["query_id"], "split": queries["split"]} |
                                        {f"{m}|{k}": v for m in method_names for k, v in runs[s]["per_q"][m].items()})
                           for s in seeds], ignore_index=True)
    with atomic_path(EVALUATION / "per_query.csv") as tmp:
        per_query.to_csv(tmp, index=False, float_format="%.4f")
    with atomic_path(PLOTS / "results.csv") as tmp:  # the mean over training runs (per run: results.parquet)
        table[table["seed"] == "mean"].drop(columns="seed").to_csv(tmp, index=False, float_format="%.4f")

    # ---- claims (AP@10 over test queries inside training runs; every baseline is chosen on validation,
    # by its mean validation mAP@10 over the runs, like every other choice)
    val_map = {m: float(np.mean([runs[s]["per_q"][m]["map@10"][is_val].mean() for s in seeds])) for m in method_names}
    backbones = [f"backbone_{bb}" for bb in p.encoder.backbones]
    best_bb = ps_eval.best_on_validation(backbones, val_map)
    singles = [f"branch_{bb}_{v}" for bb in p.encoder.backbones for v in VIEWS] + [f"view_{v}" for v in VIEWS]
    best_view = ps_eval.best_on_validation(singles, val_map)
    arms = ("fusion", "fusion+consensus", "fusion+always_rerank", best_bb, best_view, *ps_eval.ABLATIONS)
    test_ids = queries["query_id"].to_numpy()[is_test]
    ap = {s: {m: runs[s]["per_q"][m]["map@10"][is_test] for m in dict.fromkeys(arms)} for s in seeds}
    units = {"ap_at_10": ps_eval.query_units(ap, test_ids)}
    curves = {f"encoder {bb} seed {s}": live_curve(live_curve_path("encoder", bb, s)) for s in seeds for bb in p.encoder.backbones}
    curves |= {f"expert {e} seed {s}": live_curve(live_curve_path("expert", e, s)) for s in seeds for e in EXPERTS}
    kept_val = {s: float(runs[s]["kept"][is_val].mean()) for s in seeds}
    claims = evaluate_claims(ps_eval.claim_specs(best_view, best_bb), units, ps_eval.preconditions(curves, kept_val, ev),
                             ev, seed=global_seed(raw), track="person_search")
    write_unit_tables("person_search", units)

    means = table[table["seed"] == "mean"].set_index(["split", "method"])  # the means over runs, computed above
    test_summary = {m: {k: float(means.loc[("test", m), k]) for k in ("map@10", "r@1", "r@5", "r@10")} for m in method_names}
    facet_report = read_json(TEXT / "facet_report.json")
    pool_size = runs[seeds[0]]["pool_size"]
    pool_recall = float(np.mean([(runs[s]["target_pos"][is_test] >= 0).mean() for s in seeds]))

    def threshold(c) -> float | str:
        return c.threshold if np.isfinite(c.threshold) else ("always_keep" if c.threshold < 0 else "always_rerank")

    metrics = {
        "profile": raw.get("profile"),
        "claims": claims,
        "claim_summary": claim_summary(claims),
        "evidence": evidence_block(ev, global_seed(raw)),
        "summary": {m: {k: round(v, 4) for k, v in test_summary[m].items()} for m in
                    dict.fromkeys(["fusion", "fusion+consensus", "fusion+always_rerank", best_view, best_bb,
                                   *[f"fusion+{e}" for e in EXPERTS]])},
        "seeds": seeds,
        "best_single_view": best_view,
        "best_single_backbone": best_bb,
        "headroom": {"best_single_view_map@10": test_summary[best_view]["map@10"], "ceiling": 1.0,
                     f"fusion_pool_recall@{pool_size}": pool_recall},
        "consensus": {str(s): {"threshold": threshold(runs[s]["cons"]), "confidence": runs[s]["cons"].kind,
                               "val_map@10": runs[s]["cons"].val_map, "val_map@10_by_kind": runs[s]["cons"].val_map_by_kind,
                               "weights": runs[s]["cons"].weights, "temperatures": runs[s]["cons"].temperatures,
                               "val_kept_stage1_fraction": kept_val[s],
                               "test_kept_stage1_fraction": float(runs[s]["kept"][is_test].mean())} for s in seeds},
        # per run and split: AUC of each candidate gate confidence for "stage 1's top-1 is the target" (0.5: no
        # separation) and how many queries each view-agreement count holds, with stage 1's top-1 accuracy there
        "gate_confidence_separation": {str(s): runs[s]["separation"] for s in seeds},
        # summed over the training runs; per run in rerank_flips_by_seed
        "rerank_flips": {split: ps_eval.sum_flips([runs[s]["flips"][split] for s in seeds]) for split in ("val", "test")},
        "rerank_flips_by_seed": {str(s): runs[s]["flips"] for s in seeds},
        # per source (fusion = stage 1), summed over the runs: target scored above its blind twin, among
        # the blind-twin queries with both in the pool (experts blind to the landmark: about half)
        "blind_twin_order": {split: {src: {k: sum(runs[s]["twin_pairs"][split][src][k] for s in seeds)
                                          for k in ("pairs_in_pool", "target_above_twin")}
                                     for src in runs[seeds[0]]["twin_pairs"][split]} for split in ("val", "test")},
        "data_card": {k: corpus_card[k] for k in ("share_single_edits_outside_cloze_slots", "single_edits_by_attribute",
                                                   "multi_attribute_distractors", "blind_attributes",
                                                   "share_distractors_outside_cloze_slots", "share_queries_coarse", "coarse_target_share_declared",
                                                   "blind_twin_share_declared", "share_queries_with_blind_twin",
                                                   "train_blind_twin_share", "share_train_families_with_blind_twin")},
        "queries_missing_facet": facet_report["queries_missing_facet"],
        "n_test_queries": int(is_test.sum()), "n_val_queries": int(is_val.sum()),
        "n_gallery": len(gallery),
    }
    write_json(METRICS, metrics)

    # ---- contact sheet (first training run): test queries where the consensus changed the top-5, then others
    methods = runs[seeds[0]]["methods"]
    images = read_images("gallery", len(gallery), p.data.height, p.data.width)
    test_idx = np.flatnonzero(is_test)
    changed = [q for q in test_idx if not np.array_equal(methods["fusion"][q, :5], methods["fusion+consensus"][q, :5])]
    chosen = (changed + [q for q in test_idx if q not in changed])[: p.eval.contact_queries]
    sheet = sheet_for_queries([queries["caption"][q] for q in chosen], methods["fusion"][chosen],
                              methods["fusion+consensus"][chosen], targets[chosen], images)
    with atomic_path(PLOTS / "contact_sheet.png") as tmp:
        sheet.save(tmp, format="PNG")


if __name__ == "__main__":
    main()
