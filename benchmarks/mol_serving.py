"""Serving the four mol specialists from one deployment: mixed-adapter batches vs batches grouped by
adapter vs one merged model per capability, on a replayed Poisson arrival trace.

Needs a finished ``mol_train@<seed>`` (the trained base, tokenizer, test conversations and the
specialists' adapters under ``--root``)::

    PYTHONPATH=$PWD python benchmarks/mol_serving.py --root . --seed 0 --write

Requests are the turns of the test conversations, each sent to its capability's specialist
(oracle routing, so the three policies serve the same requests). Arrivals are a Poisson process
at ``--rate`` requests/s (fixed seed); the server is simulated in measured time: it waits for the
next arrival when idle, takes what has arrived (at most ``--max-batch``), runs one greedy
``generate`` call whose wall time advances the clock, and each request's latency is its finish
time minus its arrival. Policies:

- **mixed**: every waiting request in one batch, each row with its own adapter
  (``PeftModel.generate(..., adapter_names=[…])``: peft's mixed-adapter batch, eval only);
- **grouped**: the adapter of the oldest waiting request is activated (``set_adapter``) and its
  waiting requests form the batch;
- **merged**: as grouped, but each capability is served by its own merged copy of base + adapter
  (``merge_and_unload``: no LoRA matmuls at run time, four copies of the weights in memory).

Reported per policy and rate: generated tokens/s over busy time, p50/p95 latency, batches, mean
batch size, and how many answers differ from the grouped policy's (greedy decoding: they should
be identical up to float rounding of padded batches). Tests never time anything; this prints a
table, with the load average beside it. aLoRA prefix reuse is not measured here (not built).
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks/results/mol_serving.txt"


def load_specialists(root: Path, seed: int):
    """The frozen base with the four specialists as named adapters of one PeftModel, the tokenizer, the
    test turns and the merged single-task models."""
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    from paperworks.core.io import load_safetensors
    from paperworks.core.lm import load_checkpoint, load_tokenizer
    from paperworks.core.params import load_section
    from paperworks.mol import world as W
    from paperworks.mol.models import freeze, lora_model
    from paperworks.mol.params import Params

    p = load_section("mol", Params, root / "params.yaml")
    a = p.adapters
    tok = load_tokenizer(root / "data/mol/world/tokenizer.json")
    base, cfg, _ = load_checkpoint(root / "models/mol/base.safetensors")
    freeze(base)
    caps = list(W.CAPABILITIES)
    model = lora_model(base, a.rank, a.alpha_over_rank, seed=0)
    shapes = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
    adapter_dir = root / "data/mol/train" / f"seed_{seed}" / "adapters"
    for cap in caps:
        model.add_adapter(cap, model.peft_config["default"])
        set_peft_model_state_dict(model, load_safetensors(adapter_dir / f"{cap}.safetensors", shapes), adapter_name=cap)
    model.eval()
    merged = {}
    for cap in caps:
        single = lora_model(base, a.rank, a.alpha_over_rank, seed=0)
        set_peft_model_state_dict(single, load_safetensors(adapter_dir / f"{cap}.safetensors", shapes))
        merged[cap] = single.merge_and_unload().eval()
    from paperworks.mol.artifacts import read_world

    world = read_world(root / "data/mol/world")
    turns = [{"prompt": x["prompt"], "capability": x["capability"]} for x in world["test_conversations"]]
    return model, merged, tok, turns, a.max_new_tokens, caps


@torch.no_grad()
def greedy(model, tok, prompts, max_new_tokens: int, **kwargs) -> tuple[list[str], int]:
    """Greedy completions of one batch (left padding + KV cache); returns texts and generated tokens."""
    from transformers import GenerationConfig

    from paperworks.core.lm.sampling import completion_mask_from_ids, encode_prompts

    ids, mask = encode_prompts(tok, prompts)
    gen = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, use_cache=True, top_k=None, top_p=None,
                           temperature=None, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                           bos_token_id=tok.bos_token_id)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen, **kwargs)
    comp = out[:, ids.shape[1]:]
    cmask, _ = completion_mask_from_ids(comp, tok.eos_token_id)
    comp = torch.where(cmask.bool(), comp, torch.full_like(comp, tok.pad_token_id))
    return tok.batch_decode(comp, skip_special_tokens=True), int(cmask.sum())


def replay(policy: str, model, merged, tok, turns, arrivals, max_new_tokens: int, max_batch: int) -> dict:
    """Serve ``turns`` arriving at ``arrivals`` (seconds) under ``policy``; the clock advances by measured compute."""
    n = len(turns)
    finish = np.zeros(n)
    answers: list[str | None] = [None] * n
    waiting: list[int] = []
    nxt, clock, busy, tokens, batches, sizes = 0, 0.0, 0.0, 0, 0, []
    while nxt < n or waiting:
        if not waiting:
            clock = max(clock, arrivals[nxt])
        while nxt < n and arrivals[nxt] <= clock:
            waiting.append(nxt)
            nxt += 1
        if policy == "mixed":
            batch = waiting[:max_batch]
        else:  # grouped / merged: the oldest request's adapter, its waiting requests
            cap = turns[waiting[0]]["capability"]
            batch = [i for i in waiting if turns[i]["capability"] == cap][:max_batch]
        prompts = [turns[i]["prompt"] for i in batch]
        t0 = time.perf_counter()
        if policy == "mixed":
            texts, k = greedy(model, tok, prompts, max_new_tokens, adapter_names=[turns[i]["capability"] for i in batch])
        elif policy == "grouped":
            model.set_adapter(cap)
            texts, k = greedy(model, tok, prompts, max_new_tokens)
        else:
            texts, k = greedy(merged[cap], tok, prompts, max_new_tokens)
        dt = time.perf_counter() - t0
        clock += dt
        busy += dt
        tokens += k
        batches += 1
        sizes.append(len(batch))
        for i, text in zip(batch, texts):
            finish[i] = clock
            answers[i] = text
        served = set(batch)
        waiting = [i for i in waiting if i not in served]
    latency = finish - np.asarray(arrivals)
    return {"tokens_per_s": tokens / busy, "p50_ms": 1000 * float(np.percentile(latency, 50)),
            "p95_ms": 1000 * float(np.percentile(latency, 95)), "batches": batches,
            "mean_batch": float(np.mean(sizes)), "answers": answers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."), help="a work tree holding a finished mol_train@<seed>")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rates", type=float, nargs="+", default=[20.0, 80.0], help="arrivals per second")
    ap.add_argument("--requests", type=int, default=256, help="turns replayed per rate (cycled from the test conversations)")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", action="store_true", help=f"append the table to {RESULT.relative_to(ROOT)}")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, merged, tok, turns, mnt, caps = load_specialists(args.root.resolve(), args.seed)
    turns = [turns[i % len(turns)] for i in range(args.requests)]
    greedy(model, tok, [turns[0]["prompt"]], mnt, adapter_names=[turns[0]["capability"]])  # warm-up
    lines = [f"# mol serving, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, torch threads {args.threads}, specialists of seed {args.seed} "
             f"({args.requests} turns, greedy, ≤ {mnt} new tokens, max batch {args.max_batch})",
             f"{'rate/s':>7} {'policy':>8} {'tok/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'batches':>8} {'mean b':>7} "
             f"{'≠ grouped':>9} {'load':>5}"]
    print("\n".join(lines), flush=True)
    for rate in args.rates:
        rng = np.random.default_rng(0)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=len(turns)))
        results = {}
        for policy in ("grouped", "mixed", "merged"):
            load = os.getloadavg()[0]
            results[policy] = r = replay(policy, model, merged, tok, turns, arrivals, mnt, args.max_batch)
            differ = sum(x != y for x, y in zip(r["answers"], results["grouped"]["answers"]))
            line = (f"{rate:7.0f} {policy:>8} {r['tokens_per_s']:8.0f} {r['p50_ms']:8.0f} {r['p95_ms']:8.0f} "
                    f"{r['batches']:8d} {r['mean_batch']:7.1f} {differ:9d} {load:5.2f}")
            print(line, flush=True)
            lines.append(line)
    if args.write:
        with RESULT.open("a") as f:
            f.write("\n".join(lines) + "\n\n")
        print(f"appended to {RESULT}")


if __name__ == "__main__":
    main()
