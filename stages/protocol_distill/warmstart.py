"""Stage protocol_distill_warmstart: SFT on episode-format demonstrations (plain, protocol- and
answer-conditioned), then the before-online-training report: student vs privileged branches."""
from __future__ import annotations

import argparse
import logging
import math

import numpy as np

from paperworks.core.io import write_json
from paperworks.core.lm import TrainConfig, build_model, save_checkpoint, train_sft
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.protocol_distill import artifacts as A
from paperworks.protocol_distill.demos import split_heldout, strategy_donors, warm_start_examples
from paperworks.protocol_distill.evaluate import em_by_set, evaluate_prompts
from paperworks.protocol_distill.params import Params
from paperworks.protocol_distill.pipeline import branch_prompts, load_workspace, tic_words
from paperworks.protocol_distill.train import heldout_loss, packed_sft_loss, sft_batch
from paperworks.protocol_distill.world import MULTI_HOP_SETS, TRANSFER_POOL

log = logging.getLogger("paperworks.protocol_distill")


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    p = load_section("protocol_distill", Params)
    if args.size not in p.sizes or args.seed not in p.seeds:
        raise ParamsError(f"protocol_distill: --size {args.size} --seed {args.seed} not in sizes {p.sizes} / seeds {p.seeds}")
    # one warm start per (size, seed): the base model every online method of this seed starts from,
    # so warm-start variance is inside the seed-level intervals and methods are paired by seed
    seed = derive_seed(global_seed(read_params_file()), "protocol_distill", "warmstart", args.size, args.seed)
    seed_everything(seed)
    ws = load_workspace(p.search.top_k)
    w = p.warmstart
    # held-out warm-pool questions: their demonstrations (same mix, styled share and dropout) never
    # reach training; their loss is the curve the convergence check reads. sum(mix) demonstrations per
    # question are expected (2.5 in default): hold out 25 % more questions than that needs, keep the first n
    n_held = math.ceil(1.25 * w.heldout_examples / max(sum(w.mix.model_dump().values()), 0.1))
    train_qs, held_qs = split_heldout(ws.pool("warm"), min(len(ws.pool("warm")) - 1, n_held), seed)
    demo = dict(teachers=p.teachers, mix=w.mix.model_dump(), question_dropout=w.question_dropout,
                style_teachers=tuple(p.style_teachers), styled_share=w.styled_share, plain_redirect=w.plain_redirect)
    # strategy demonstrations: another TRAINING question's protocol (of the first teacher) in front of
    # this one; held-out questions take their donors from the training questions too
    donors = strategy_donors(train_qs, train_qs, ws.protocols, p.teachers[0], ws.names, seed) if w.mix.strategy > 0 else {}
    h_donors = strategy_donors(held_qs, train_qs, ws.protocols, p.teachers[0], ws.names, seed) if w.mix.strategy > 0 else {}
    prompts, completions, counts = warm_start_examples(ws.codec, ws.tool, train_qs, ws.protocols, seed=seed, donors=donors, **demo)
    h_prompts, h_completions, _ = warm_start_examples(ws.codec, ws.tool, held_qs, ws.protocols, seed=seed + 1, donors=h_donors, **demo)
    if not h_prompts:
        raise ParamsError("protocol_distill.warmstart.heldout_examples: the held-out questions gave no demonstration")
    cfg = getattr(p.models, args.size)
    data = sft_batch(ws.codec, prompts, completions, cfg.max_positions)
    held = sft_batch(ws.codec, h_prompts[: w.heldout_examples], h_completions[: w.heldout_examples], cfg.max_positions)
    counts["heldout"] = len(h_prompts[: w.heldout_examples])
    model = build_model(cfg, len(ws.codec), seed=seed)
    tics = tic_words(ws, p.teachers)
    r = p.rollout
    probe_qs = ws.pool("online")[:: max(1, len(ws.pool("online")) // p.warmstart.probe_questions)][: p.warmstart.probe_questions]
    probe_student = branch_prompts(ws, probe_qs, "student")
    probe_priv = branch_prompts(ws, probe_qs, p.teachers[0])

    steps = getattr(w.steps, args.size)
    log_every = max(1, steps // 25)
    probed = {"bucket": 0}

    def evaluate(step: int) -> dict[str, float]:
        # held-out loss at every log point (cheap: ≤ 128 examples, no rollouts); the probe's greedy
        # episodes only when a multiple of eval_every was passed, and at the end
        row = {"heldout_loss": heldout_loss(model, held)}
        if step // w.eval_every > probed["bucket"] or step == steps:
            probed["bucket"] = step // w.eval_every
            row.update(probe(step))
        return row

    def probe(step: int) -> dict[str, float]:
        # the privileged branch's own EM, logged throughout (it can drift and drag the student)
        s = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_student, tics, r.max_completion, r.max_searches, p.eval_batch_size)
        v = evaluate_prompts(model, ws.codec, ws.tool, probe_qs, probe_priv, tics, r.max_completion, r.max_searches, p.eval_batch_size)
        return {"probe_student_em": float(np.mean([x["em"] for x in s])), "probe_privileged_em": float(np.mean([x["em"] for x in v]))}

    history = train_sft(model, data, TrainConfig(steps=steps, batch_size=w.batch_size, lr=getattr(w.lr, args.size),
                                                 warmup_steps=w.warmup_steps, eval_every=log_every, log_every=log_every),
                        seed=seed, live_dir=A.warm_live_dir(args.size, args.seed), eval_fn=evaluate, loss_fn=packed_sft_loss,
                        desc=f"warm {args.size}/{args.seed}")
    save_checkpoint(model, A.warm_model_path(args.size, args.seed), cfg, len(ws.codec))
    # before online training: how much does each privileged context help on the held-out questions?
    test = ws.pool("test")
    branches = {}
    for branch in p.branches():
        rows = evaluate_prompts(model, ws.codec, ws.tool, test, branch_prompts(ws, test, branch), tics,
                                r.max_completion, r.max_searches, p.eval_batch_size)
        # tic_share: how often this branch itself writes a teacher tic (the styled branches are the
        # KL target of MAPD[styled]: style can only reach the student through them)
        branches[branch] = {"em_by_set": em_by_set(rows), "em_per_question": {x["qid"]: x["em"] for x in rows},
                            "tic_share": float(np.mean([x["style_drift"] for x in rows]))}
        multi = [x["em"] for x in rows if x["qset"] in MULTI_HOP_SETS]
        branches[branch]["em_multi_hop"] = float(np.mean(multi))
        log.info("warm %s/%d %s: avg EM %.3f, multi-hop %.3f", args.size, args.seed, branch,
                 branches[branch]["em_by_set"]["avg"], branches[branch]["em_multi_hop"])
    # issue 15: the transfer questions (closed region: no entity in any training question or protocol)
    # for the student and the strategy branch, and which questions meet a redirect
    transfer_qs = ws.pool(TRANSFER_POOL)
    transfer = {}
    for branch in (["student", *p.strategy_branches()] if transfer_qs else []):
        rows = evaluate_prompts(model, ws.codec, ws.tool, transfer_qs, branch_prompts(ws, transfer_qs, branch), tics,
                                r.max_completion, r.max_searches, p.eval_batch_size)
        transfer[branch] = {"em_by_set": em_by_set(rows), "em_per_question": {x["qid"]: x["em"] for x in rows}}
        log.info("warm %s/%d %s on transfer questions: avg EM %.3f", args.size, args.seed, branch, transfer[branch]["em_by_set"]["avg"])
    redirected = sorted(q["qid"] for q in test + transfer_qs if q.get("redirected"))
    write_json(A.warm_report_path(args.size, args.seed), {"demonstrations": counts, "final_loss": history[-1]["loss"],
                                                          "final_heldout_loss": history[-1]["heldout_loss"],
                                                          "branches": branches, "transfer": transfer, "redirected": redirected,
                                                          "tic_words": sorted(tics)})


if __name__ == "__main__":
    main()
