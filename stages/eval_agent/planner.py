"""Stage eval_agent_planner@<seed>: the scripted planner's step records, SFT of a tiny ``core/lm`` planner on them (one
training draw per ``eval_agent.planner.seeds`` entry: initialisation, batch order and retry sampling), its rollouts.

Records: the scripted planner's sessions on population generators, one record per decision
(instruction, history, observation → reasoning + JSON action, as EA-CoT's instruction / history /
<think> / <information> steps), written to ``data/eval_agent/planner/seed_<seed>/records.parquet`` (the same records
for every draw: they depend on the global seed only). (One stage,
not two: a separate records stage cost ≈ 5 CPU-s of imports per run in CI's smoke test.)

The rollouts are the scripted agent's evaluation sessions (same models, pools, seeds and sample
queues as ``eval_agent_evaluate``'s agent arm), in-family and on the held-out family C, driven by
the trained planner's validated JSON actions.
"""
from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import torch

from paperworks.core.io import write_json, write_parquet
from paperworks.core.lm import (LMConfig, TrainConfig, build_model, encode_sft, save_checkpoint, save_tokenizer, train_sft,
                                train_tokenizer)
from paperworks.core.lm.train import sft_loss
from paperworks.core.params import ParamsError, global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import (RECORD_SCHEMA, ROLLOUT_SCHEMA, planner_dir, planner_live, planner_models,
                                             read_outcomes)
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.planner import StepState, build_records, refusal_kind, rollout
from paperworks.eval_agent.report import levels, pools
from paperworks.eval_agent.world import STRATA


@stage_main
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True, help="one of params eval_agent.planner.seeds")
    draw = ap.parse_args().seed
    p = load_section("eval_agent", Params)
    q = p.planner
    if draw not in q.seeds:
        raise ParamsError(f"--seed {draw}: not in params eval_agent.planner.seeds {q.seeds}")
    out_dir, model_dir = planner_dir(draw), planner_models(draw)
    seed = global_seed(read_params_file())
    torch.set_num_threads(1)
    outcomes = read_outcomes()
    records = build_records(outcomes, p, seed)
    write_parquet(out_dir / "records.parquet", records, RECORD_SCHEMA)
    train, held = records[records["split"] == "train"], records[records["split"] == "heldout"]
    tok = train_tokenizer(list(train["prompt"] + train["completion"]), vocab_size=q.vocab_size)
    cfg = LMConfig(hidden_size=q.hidden, num_layers=q.layers, num_heads=q.heads, intermediate_size=q.hidden * 8 // 3,
                   max_positions=q.max_positions)
    model = build_model(cfg, vocab_size=len(tok), seed=derive_seed(seed, "eval_agent", "planner", "init", draw))
    data = encode_sft(tok, list(train["prompt"]), list(train["completion"]), cfg.max_positions)
    held_data = encode_sft(tok, list(held["prompt"]), list(held["completion"]), cfg.max_positions)

    def heldout_loss(step: int) -> dict:
        with torch.no_grad():
            losses = [sft_loss(model, {k: v[i:i + 256] for k, v in held_data.items()}).item() * min(256, len(held) - i)
                      for i in range(0, len(held), 256)]
        return {"heldout_loss": float(np.sum(losses) / len(held))}

    tc = TrainConfig(steps=q.steps, batch_size=q.batch_size, lr=q.lr, warmup_steps=min(50, q.steps // 10),
                     log_every=q.eval_every, eval_every=q.eval_every)
    history = train_sft(model, data, tc, seed=derive_seed(seed, "eval_agent", "planner", "sft", draw), live_dir=planner_live(draw),
                        eval_fn=heldout_loss, desc=f"planner sft (seed {draw})")
    save_checkpoint(model, model_dir / "planner.safetensors", cfg, len(tok))
    save_tokenizer(tok, model_dir / "planner_tokenizer.json")

    # Rollouts: the evaluation sessions of the scripted agent (report.run_sessions' seeds and run-b pools).
    edges = levels(outcomes, p.zoo.dims)
    models = outcomes[outcomes["role"] != "population"][["model", "family", "role"]].drop_duplicates().sort_values("model")
    states, dims, aspects, keys = [], [], [], []
    for m in models.itertuples(index=False):
        for dim in p.zoo.dims:
            pool = pools(outcomes, m.model, "b", dim)
            weights = np.bincount(pool.stratum, minlength=len(STRATA[dim])) / len(pool.stratum)
            for rep in range(p.agent.repeats):
                rng = np.random.default_rng(derive_seed(seed, "eval_agent", "session", m.model, dim, rep))
                states.append(StepState.start(pool, weights, edges[dim], p.agent, rng))
                dims.append(dim)
                aspects.append(STRATA[dim])
                keys.append({"model": m.model, "family": m.family, "role": m.role, "dim": dim, "repeat": rep})
    counts, log = rollout(model, tok, states, dims, aspects, q.max_new_tokens, derive_seed(seed, "eval_agent", "planner", "retry", draw))
    rows = [{**k, "level": s.level, "n": len(s.rows), "estimate": s.estimate, "rounds": s.round, "reason": s.reason, **c}
            for k, s, c in zip(keys, states, counts)]
    write_parquet(out_dir / "rollouts.parquet", pd.DataFrame(rows, columns=ROLLOUT_SCHEMA.names), ROLLOUT_SCHEMA)
    for e in log:
        e.update(keys[e["session"]])
    decisions = sum(c["decisions"] for c in counts)
    invalid = sum(c["invalid"] for c in counts)
    by_kind: dict[str, dict[str, int]] = {}  # refusals per kind, first try and retry, over every session (the log keeps 200)
    for e in log:
        for key, why in (("first_try", e["why"]), ("retry", e["retry_why"])):
            if why:
                k = by_kind.setdefault(refusal_kind(why), {"first_try": 0, "retry": 0})
                k[key] += 1
    write_json(out_dir / "actions.json", {"records": {"train": len(train), "heldout": len(held)}, "vocab": len(tok),
                                          "decisions": decisions, "invalid": invalid,
                                          "retried_ok": sum(c["retried_ok"] for c in counts),
                                          "fallbacks": sum(c["fallbacks"] for c in counts),
                                          "refusals": dict(sorted(by_kind.items())),
                                          "invalid_log": log[:200], "invalid_log_total": len(log),
                                          "final_heldout_loss": history[-1].get("heldout_loss")})
    print(f"planner seed {draw}: {len(records)} step records from {records.groupby(['generator', 'dim', 'repeat']).ngroups} scripted sessions, "
          f"{len(train)} train records, held-out loss {history[-1].get('heldout_loss'):.4f}; "
          f"{decisions} decisions, {invalid} invalid first tries, {sum(c['fallbacks'] for c in counts)} fallbacks")


if __name__ == "__main__":
    main()
