"""Stage selfdistill_base: SFT on a small share of worked solutions (plain and privileged format).

The result is the student's starting point and the frozen reference policy π_ref.
"""
from __future__ import annotations

from paperworks.core.io import write_json
from paperworks.core.lm import TrainConfig, build_model, encode_sft, save_checkpoint, train_sft
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed, seed_everything
from paperworks.core.stage import stage_main
from paperworks.selfdistill.evaluation import probe
from paperworks.selfdistill.params import Params
from paperworks.selfdistill.pipeline import BASE_FILE, DATA, PLOTS, eval_subset, load_inputs, split


BASE_PROBES = 12  # the generic plateau check needs ≥ 10 points


@stage_main
def main() -> None:
    p = load_section("selfdistill", Params)
    seed = derive_seed(global_seed(read_params_file()), "selfdistill", "base")
    seed_everything(seed)
    tasks, tok = load_inputs(p)
    sft = tasks[tasks["split"] == "sft"]
    prompts = [pp if priv else pl for pl, pp, priv in zip(sft["prompt"], sft["privileged_prompt"], sft["use_privileged"])]
    data = encode_sft(tok, prompts, list(sft["completion"]), p.model.max_positions)
    evals = eval_subset(split(tasks, "val"), p.opsd.n_eval_per_family)
    model = build_model(p.model, len(tok), seed=seed)
    cfg = TrainConfig(steps=p.base.steps, batch_size=p.base.batch_size, lr=p.base.lr, warmup_steps=p.base.warmup_steps,
                      grad_clip=p.base.grad_clip, log_every=max(1, p.base.steps // 20),
                      eval_every=-(-p.base.steps // BASE_PROBES))  # ≈ BASE_PROBES validation points: enough to see a plateau
    history = train_sft(model, data, cfg, seed=seed, live_dir=PLOTS / "live_base",
                        eval_fn=lambda step: probe(model, model, tok, evals, p.opsd.max_new_tokens), desc="base sft")
    n_params = sum(t.numel() for t in model.parameters())
    save_checkpoint(model, BASE_FILE, p.model, len(tok), extra={"n_params": n_params})
    write_json(DATA / "base_history.json", {"n_params": n_params, "history": history})
    print({k: round(v, 3) for k, v in history[-1].items()})


if __name__ == "__main__":
    main()
