"""insurance_zeroshot: instructed zero-shot reranker with an optimised instruction (Fig. 1)."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from paperworks.core.io import atomic_path, write_json, write_parquet
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.insurance import first_stage as fs
from paperworks.insurance import paths
from paperworks.insurance import zeroshot as zs
from paperworks.insurance.crossencoder import metrics_schema, per_query_metrics
from paperworks.insurance.params import Params

log = logging.getLogger("paperworks.insurance")


@stage_main
def main() -> None:
    p = load_section("insurance", Params)
    z = p.zeroshot
    seed = derive_seed(global_seed(read_params_file()), "insurance", "zeroshot")
    seed_everything(seed)
    val = fs.read_lists(paths.lists_file("val"), p.first_stage.relevant_grade)
    test = fs.read_lists(paths.lists_file("test"), p.first_stage.relevant_grade)
    try:
        zs.parse(z.initial_instruction)
    except ValueError as e:
        from paperworks.core.params import ParamsError
        raise ParamsError(f"insurance.zeroshot.initial_instruction: {e}") from None

    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(paths.BACKBONE["general"]), device="cpu")
    encoder.max_seq_length = p.backbone.max_length
    reranker = zs.InstructedReranker(encoder)

    def val_ndcg3(instruction: str) -> float:
        return float(per_query_metrics(val, reranker.score_lists(instruction, val), [3])["ndcg@3"].mean())

    result = zs.optimise_instruction(val_ndcg3, z.initial_instruction, z.max_iterations, z.proposals_per_iteration,
                                     z.patience, seed)
    ks = p.eval.ks
    # the plain bi-encoder (same backbone, bare query, cosine) is the meaningful untrained base
    for name, ins in (("bi_encoder", None), ("initial", result["initial_instruction"]), ("optimized", result["best_instruction"])):
        write_parquet(paths.ZEROSHOT / f"{name}_test.parquet",
                      per_query_metrics(test, reranker.score_lists(ins, test), ks), metrics_schema(ks))
    result["val_lists"] = len(val)
    result["bi_encoder_val_ndcg@3"] = float(per_query_metrics(val, reranker.score_lists(None, val), [3])["ndcg@3"].mean())
    write_json(paths.ZEROSHOT / "result.json", result)
    curve = pd.DataFrame(result["curve"])
    with atomic_path(paths.PLOTS / "zeroshot_curve.csv") as tmp:
        curve[["iteration", "best_score", "proposal_score"]].to_csv(tmp, index=False)
    plot_curve(curve, result)
    log.info("zero-shot: %.4f -> %.4f val NDCG@3 in %d iterations; best: %s", result["initial_score"],
             result["best_score"], result["iterations"], result["best_instruction"])


def plot_curve(curve: pd.DataFrame, result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(curve["iteration"], curve["best_score"], marker="o", label="best so far")
    ax.scatter(curve["iteration"], curve["proposal_score"], marker="x", color="grey", label="iteration's best proposal")
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation NDCG@3")
    ax.set_title("Instruction optimisation (zero-shot reranker)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    with atomic_path(paths.PLOTS / "zeroshot_curve.png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
