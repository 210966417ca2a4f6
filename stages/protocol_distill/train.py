"""Stage protocol_distill_train@<size>-<run>-<seed>: one online run from the seed's warm start,
evaluated on the held-out questions. One run per stage, single-threaded, so runs go in parallel.

Runs (``online.runs``): grpo, opsd, trace (SFT on the teachers' raw traces, at its own learning
rate and step count), mapd_<teacher>, mapd_<teacher>_styled (protocols with the teacher's style in
their free-form fields) and mapd_<teacher>_lam<λ>. Every run of one (size, seed) starts from the
same warm start and sees the same question order (the order seed depends on size and seed only)."""
from __future__ import annotations

import argparse
import logging
import math

import numpy as np
import pandas as pd

from paperworks.core.io import write_json, write_parquet
from paperworks.core.lm import TrainConfig, load_checkpoint, save_checkpoint, train_sft
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.demos import online_items, split_heldout, trace_examples
from paperworks.protocol_distill.evaluate import em_by_set, evaluate_prompts
from paperworks.protocol_distill.params import Params, parse_run
from paperworks.protocol_distill.pipeline import branch_prompts, load_workspace, tic_words
from paperworks.protocol_distill.train import OnlineConfig, heldout_loss, packed_sft_loss, sft_batch, train_online
from paperworks.protocol_distill.world import TRANSFER_POOL

log = logging.getLogger("paperworks.protocol_distill")


def trace_fit(ws, prompts: list[list[int]], completions, cap: int, max_positions: int, test_prompts: list[list[int]]) -> dict:
    """Check, before training, that every training trace fits the trace student's rollout cap (tool
    tokens count toward it) and that the cap fits the model's context after the longest test prompt."""
    lengths = [len(c.words) for c in completions]
    longest = max(lengths)
    if longest > cap:
        over = sum(n > cap for n in lengths)
        raise ParamsError(f"protocol_distill.trace.max_completion: {cap} < the longest training trace ({longest} tokens; "
                          f"{over} of {len(lengths)} traces exceed it)")
    need = max(len(p) for p in test_prompts) + cap
    if need > max_positions:
        raise ParamsError(f"protocol_distill.trace.max_completion: {cap} + the longest test prompt needs {need} positions, "
                          f"the model has max_positions={max_positions}")
    return {"traces": len(lengths), "longest_trace_tokens": longest, "mean_trace_tokens": float(np.mean(lengths)), "cap": cap}


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("protocol_distill", Params)
    if args.size not in p.sizes or args.seed not in p.seeds or args.run not in p.online.runs:
        raise ParamsError(f"protocol_distill: --size {args.size} --run {args.run} --seed {args.seed} not in sizes {p.sizes} / "
                          f"online.runs {p.online.runs} / seeds {p.seeds}")
    spec = parse_run(args.run, p.online.kl_coef)
    gseed = global_seed(read_params_file())
    ws = load_workspace(p.search.top_k)
    tics = tic_words(ws, p.teachers)
    o, r = p.online, p.rollout
    test = ws.pool("test")
    test_prompts = branch_prompts(ws, test, "student")
    online_qs = ws.pool("online")
    probe_qs = online_qs[:: max(1, len(online_qs) // p.warmstart.probe_questions)][: p.warmstart.probe_questions]
    # paired across methods: the seed of the question order and of the sampling depends on (size, seed) only
    seed = derive_seed(gseed, "protocol_distill", "online", args.size, args.seed)
    seed_everything(seed)
    model, cfg, vocab = load_checkpoint(A.warm_model_path(args.size, args.seed))
    if vocab != len(ws.codec):
        raise ParamsError(f"warm-start checkpoint has vocab {vocab}, tokenizer has {len(ws.codec)}: rerun warmstart")
    live_dir = A.online_live_dir(args.size, args.run, args.seed)
    cap = r.max_completion
    extra: dict = {}
    if spec.method == "trace":
        tr = p.trace
        # held-out online questions (up to one trace per teacher each): their traces never reach
        # training; their loss is the curve the convergence check reads
        n_held = math.ceil(1.25 * tr.heldout_examples / len(p.teachers))
        train_qs, held_qs = split_heldout(online_qs, min(len(online_qs) - 1, n_held), seed)
        prompts, completions = trace_examples(ws.codec, train_qs, ws.protocol_rows, p.teachers)
        h_prompts, h_completions = trace_examples(ws.codec, held_qs, ws.protocol_rows, p.teachers)
        h_prompts, h_completions = h_prompts[: tr.heldout_examples], h_completions[: tr.heldout_examples]
        if not h_prompts:
            raise ParamsError("protocol_distill.trace.heldout_examples: the held-out questions gave no trace")
        extra["trace_fit"] = trace_fit(ws, prompts + h_prompts, completions + h_completions, tr.max_completion, cfg.max_positions,
                                       test_prompts)
        cap = tr.max_completion
        data = sft_batch(ws.codec, prompts, completions, cfg.max_positions)
        held = sft_batch(ws.codec, h_prompts, h_completions, cfg.max_positions)
        extra["trace_fit"].update(trained_traces=len(prompts), heldout_traces=len(h_prompts))
        hist = train_sft(model, data, TrainConfig(steps=tr.steps, batch_size=tr.batch_size, lr=tr.lr, warmup_steps=tr.warmup_steps,
                                                  log_every=tr.log_every, eval_every=tr.log_every),
                         seed=seed, live_dir=live_dir, eval_fn=lambda step: {"heldout_loss": heldout_loss(model, held)}, loss_fn=packed_sft_loss,
                         desc=f"trace {args.size}/{args.seed}")
    else:
        context = {"grpo": "none", "opsd": "answer", "mapd": "protocol"}[spec.method]
        # MAPD on strategy protocols (online.kl_protocol): each online question's KL target reads another
        # online question's protocol, which names none of its entities and so cannot hand it the answer
        strategy = spec.method == "mapd" and o.kl_protocol == "strategy"
        items = online_items(ws.codec, online_qs, ws.protocols, context, spec.protocol_source or None,
                             donors=ws.donors(spec.protocol_source) if strategy else None)
        priv_branch = spec.protocol_source or ("answer" if spec.method == "opsd" else p.teachers[0])
        if strategy:
            priv_branch = f"{spec.protocol_source}_strategy"
            extra["kl_protocol"] = {"kind": "strategy", "items_with_protocol": sum(it.privileged is not None for it in items),
                                    "items": len(items)}
        probe_student = branch_prompts(ws, probe_qs, "student")
        probe_priv = branch_prompts(ws, probe_qs, priv_branch)

        def probe() -> dict[str, float]:
            s = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_student, tics, r.max_completion, r.max_searches, p.eval_batch_size)
            v = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_priv, tics, r.max_completion, r.max_searches, p.eval_batch_size)
            return {"probe_student_em": float(np.mean([x["em"] for x in s])),
                    "probe_privileged_em": float(np.mean([x["em"] for x in v])),
                    "probe_student_tics": float(np.mean([x["style_drift"] for x in s]))}

        ocfg = OnlineConfig(method=spec.method, steps=o.steps, prompts_per_step=o.prompts_per_step, group_size=o.group_size,
                            lr=o.lr, temperature=o.temperature, clip_eps=o.clip_eps, normalise_std=o.normalise_std,
                            kl_coef=spec.kl_coef, kl_warmup_steps=o.kl_warmup_steps, kl_direction=o.kl_direction,
                            max_completion=r.max_completion, max_searches=r.max_searches, probe_every=o.probe_every)
        hist = train_online(model, ws.codec, ws.tool, items, ocfg, seed, live_dir=live_dir, probe=probe)
    save_checkpoint(model, A.online_model_path(args.size, args.run, args.seed), cfg, vocab)
    rows = evaluate_prompts(model, ws.codec, ws.tool, test, test_prompts, tics, cap, r.max_searches, p.eval_batch_size)
    # the transfer questions (issue 15) are evaluated beside the test questions, marked by their pool
    transfer_qs = ws.pool(TRANSFER_POOL)
    t_rows = evaluate_prompts(model, ws.codec, ws.tool, transfer_qs, branch_prompts(ws, transfer_qs, "student"), tics, cap,
                              r.max_searches, p.eval_batch_size) if transfer_qs else []
    flags = {q["qid"]: bool(q.get("redirected")) for q in test + transfer_qs}
    for row, pool in [(x, "test") for x in rows] + [(x, TRANSFER_POOL) for x in t_rows]:
        row.update(pool=pool, redirected=flags[row["qid"]])
    rows = rows + t_rows
    log.info("%s/%s/%d: test EM %s, no answer %d/%d", args.size, args.run, args.seed,
             {k: round(v, 3) for k, v in em_by_set([x for x in rows if x["pool"] == "test"]).items()}, sum(x["answered"] == 0 for x in rows), len(rows))
    for row in rows:
        row.update(size=args.size, seed=args.seed, run=spec.run, method=spec.method, teacher=spec.protocol_source,
                   kl_coef=spec.kl_coef, max_completion=cap)
    write_parquet(A.run_table_path(args.size, args.run, args.seed), pd.DataFrame(rows), A.RUN_SCHEMA)
    write_json(A.run_history_path(args.size, args.run, args.seed), {"history": hist, **extra})


if __name__ == "__main__":
    main()
