"""Stage protocol_distill_train: from one warm start, every online method under the same budget,
each evaluated on the held-out questions.

Runs: grpo, opsd, trace (SFT on the teachers' raw traces), mapd_<teacher> for every teacher, and
the λ sweep mapd_<first teacher>_lam<λ>."""
from __future__ import annotations

import argparse
import logging

import numpy as np
import pandas as pd

from paperworks.core.io import write_json, write_parquet
from paperworks.core.lm import TrainConfig, load_checkpoint, save_checkpoint, train_sft
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.demos import online_items, trace_examples
from paperworks.protocol_distill.evaluate import em_by_set, evaluate_prompts
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.pipeline import branch_prompts, load_workspace, tic_words
from paperworks.protocol_distill.train import OnlineConfig, sft_batch, train_online

log = logging.getLogger("paperworks.protocol_distill")


def run_specs(p: Params, size: str) -> list[dict]:
    """(run name, method, teacher, λ) for every online run of one student size."""
    specs = []
    for m in p.online.methods:
        if m == "mapd":
            specs += [{"run": f"mapd_{t}", "method": "mapd", "teacher": t, "kl_coef": p.online.kl_coef} for t in p.teachers]
        else:
            specs.append({"run": m, "method": m, "teacher": "", "kl_coef": p.online.kl_coef if m == "opsd" else 0.0})
    if "mapd" in p.online.methods and size in p.online.lambda_sweep_sizes:
        t = p.teachers[0]
        specs += [{"run": f"mapd_{t}_lam{lam:g}", "method": "mapd", "teacher": t, "kl_coef": lam}
                  for lam in p.online.lambda_sweep if lam != p.online.kl_coef]
    return specs


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("protocol_distill", Params)
    if args.size not in p.sizes or args.seed not in p.seeds:
        raise ParamsError(f"protocol_distill: --size {args.size} --seed {args.seed} not in sizes {p.sizes} / seeds {p.seeds}")
    gseed = global_seed(read_params_file())
    ws = load_workspace(p.search.top_k)
    tics = tic_words(p.teachers)
    o, r = p.online, p.rollout
    test = ws.pool("test")
    test_prompts = branch_prompts(ws, test, "student")
    online_qs = ws.pool("online")
    probe_qs = online_qs[:: max(1, len(online_qs) // p.warmstart.probe_questions)][: p.warmstart.probe_questions]
    tables, histories = [], {}
    for spec in run_specs(p, args.size):
        seed = derive_seed(gseed, "protocol_distill", "train", args.size, args.seed, spec["run"])
        seed_everything(seed)
        model, cfg, vocab = load_checkpoint(A.warm_model_path(args.size))
        if vocab != len(ws.codec):
            raise ParamsError(f"warm-start checkpoint has vocab {vocab}, tokenizer has {len(ws.codec)}: rerun warmstart")
        live_dir = A.PLOTS / f"live_online_{args.size}_{args.seed}" / spec["run"]
        if spec["method"] == "trace":
            prompts, completions = trace_examples(ws.codec, online_qs, ws.protocol_rows, p.teachers)
            data = sft_batch(ws.codec, prompts, completions, cfg.max_positions)
            hist = train_sft(model, data, TrainConfig(steps=o.steps, batch_size=o.trace_batch_size, lr=o.lr, warmup_steps=0,
                                                      min_lr_ratio=1.0, log_every=max(1, o.probe_every)),
                             seed=seed, live_dir=live_dir, desc=f"trace {args.size}/{args.seed}")
        else:
            context = {"grpo": "none", "opsd": "answer", "mapd": "protocol"}[spec["method"]]
            items = online_items(ws.codec, online_qs, ws.protocols, context, spec["teacher"] or None)
            priv_branch = spec["teacher"] or ("answer" if spec["method"] == "opsd" else p.teachers[0])
            probe_student = branch_prompts(ws, probe_qs, "student")
            probe_priv = branch_prompts(ws, probe_qs, priv_branch)

            def probe() -> dict[str, float]:
                s = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_student, tics, r.max_completion, r.max_searches, p.eval_batch_size)
                v = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_priv, tics, r.max_completion, r.max_searches, p.eval_batch_size)
                return {"probe_student_em": float(np.mean([x["em"] for x in s])),
                        "probe_privileged_em": float(np.mean([x["em"] for x in v]))}

            ocfg = OnlineConfig(method=spec["method"], steps=o.steps, prompts_per_step=o.prompts_per_step, group_size=o.group_size,
                                lr=o.lr, temperature=o.temperature, clip_eps=o.clip_eps, normalise_std=o.normalise_std,
                                kl_coef=spec["kl_coef"], kl_warmup_steps=o.kl_warmup_steps, kl_direction=o.kl_direction,
                                max_completion=r.max_completion, max_searches=r.max_searches, probe_every=o.probe_every)
            hist = train_online(model, ws.codec, ws.tool, items, ocfg, seed, live_dir=live_dir, probe=probe)
        histories[spec["run"]] = hist
        save_checkpoint(model, A.MODELS / f"online_{args.size}_{args.seed}" / f"{spec['run']}.safetensors", cfg, vocab)
        rows = evaluate_prompts(model, ws.codec, ws.tool, test, test_prompts, tics, r.max_completion, r.max_searches, p.eval_batch_size)
        log.info("%s/%d %s: test EM %s", args.size, args.seed, spec["run"], {k: round(v, 3) for k, v in em_by_set(rows).items()})
        for row in rows:
            row.update(size=args.size, seed=args.seed, **spec)
        tables.extend(rows)
    write_parquet(A.run_table_path(args.size, args.seed), pd.DataFrame(tables), A.RUN_SCHEMA)
    write_json(A.RUNS_DIR / f"{args.size}_{args.seed}_history.json", histories)


if __name__ == "__main__":
    main()
