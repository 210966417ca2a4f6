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
table, with the load average beside it.

**aLoRA prefix reuse** (second table, ``--prefix-reuse``; ``paperworks/mol/alora.py``): whole test
conversations, each turn's context = every earlier turn (prompt + reference answer) + the new prompt, so a
capability switch keeps the history. Four aLoRA specialists (peft ``LoraConfig(alora_invocation_tokens=…)``,
invocation ``\nassistant:``) are **trained here**, with the specialists' recipe (``mol.adapters``: rank, alpha,
lr, batch, ``--alora-steps`` = ``adapters.steps`` unless given) on the same training items — they are a
different adapter kind, so the stage's LoRA specialists cannot be reused. Arms (batches grouped by adapter,
greedy, a hand-written decode loop with a per-row key/value cache for every arm):

- ``lora/none``: the stage's LoRA specialists, every turn prefills its whole context;
- ``lora/same_adapter``: … a turn reuses the cache while its conversation stays on one adapter (a switch
  prefills the whole context again: a LoRA's key/values are its own);
- ``alora/none``: the aLoRA specialists, whole context every turn (the numerical reference);
- ``alora/base_prefix``: the aLoRA specialists on the base's cached prefix: a turn prefills only what follows
  the previous turn's base prefix (its invocation, its answer, the new prompt), whatever adapter comes next.

Arrivals: the same Poisson trace (turn k of the flattened conversations at ``arrivals[k]``, but not before its
conversation's previous turn finished; latency from then). Reported: prefill tokens, the saving vs
``lora/same_adapter``, generated tokens/s, p50/p95 latency, verified success per turn, and how many answers of
``alora/base_prefix`` differ from ``alora/none`` (the reuse must not change them).
"""
from __future__ import annotations

import argparse
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


def train_alora_specialists(root: Path, seed: int, base, tok, steps: int | None):
    """Four aLoRA specialists on the frozen base, with the LoRA specialists' recipe and training items."""
    from paperworks.core.params import global_seed, load_section, read_params_file
    from paperworks.core.seeding import derive_seed
    from paperworks.mol import alora as A
    from paperworks.mol import world as W
    from paperworks.mol.artifacts import read_world
    from paperworks.mol.models import train_on
    from paperworks.mol.params import Params

    p = load_section("mol", Params, root / "params.yaml")
    a = p.adapters
    g = global_seed(read_params_file(root / "params.yaml"))
    world = read_world(root / "data/mol/world")
    inv = A.invocation_ids(tok)
    out, cpu = {}, {}
    for cap in W.CAPABILITIES:
        A.check_prompts(tok, [x["prompt"] for x in world["train"][cap] + world["test"][cap]], inv)
        t0 = time.process_time()
        model = A.alora_model(base, a.rank, a.alpha_over_rank, derive_seed(g, "mol", "alora", cap, seed), inv)
        dev = world["dev"][cap]
        share = (lambda outs, dev=dev: sum(W.verify(x["capability"], W.request_from_dict(x), o, world["tables"])
                                           for x, o in zip(dev, outs)) / len(dev))
        hist = train_on(model, tok, world["train"][cap], dev, steps or a.steps, a.lr, a, p.base.model.max_positions,
                        derive_seed(g, "mol", "alora_order", cap, seed), a.eval_every, None, f"alora {cap}", share)
        cpu[cap] = time.process_time() - t0
        out[cap] = model.eval()
        print(f"aLoRA {cap}: {steps or a.steps} steps, {cpu[cap]:.0f} CPU-s, dev success "
              f"{' '.join(format(h['dev_success'], '.2f') for h in hist if 'dev_success' in h)}", flush=True)
    return out, inv, world, cpu


def prefix_reuse(root: Path, seed: int, lora, tok, mnt: int, caps, args) -> list[str]:
    """The aLoRA prefix-reuse table (see the module docstring)."""
    from paperworks.core.lm import load_checkpoint
    from paperworks.mol import alora as A
    from paperworks.mol import world as W
    from paperworks.mol.models import freeze, generate

    base, _, _ = load_checkpoint(root / "models/mol/base.safetensors")
    freeze(base)
    alora, inv, world, cpu = train_alora_specialists(root, seed, base, tok, args.alora_steps)
    own = {}
    for cap in caps:  # the aLoRA specialists on their own single-turn suites (the stage's LoRA: results.json)
        items = world["test"][cap]
        outs = generate(alora[cap], tok, [x["prompt"] for x in items], mnt)
        own[cap] = sum(W.verify(cap, W.request_from_dict(x), o, world["tables"]) for x, o in zip(items, outs)) / len(items)
    from paperworks.core.io import read_json

    res = read_json(root / "data/mol/train" / f"seed_{seed}" / "results.json")
    lora_own = {cap: float(np.mean([r["success"] for r in res["suite"] if r["arm"] == "specialists" and r["capability"] == cap]))
                for cap in caps}
    convs_all = A.conversation_turns(tok, world["test_conversations"])
    convs, n = [], 0
    while n < args.requests:
        c = convs_all[len(convs) % len(convs_all)]
        convs.append(c)
        n += len(c)
    flat = [t for c in convs for t in c]
    switches = sum(c[t]["capability"] != c[t - 1]["capability"] for c in convs for t in range(1, len(c)))

    def select_lora(cap):
        lora.set_adapter(cap)
        return lora

    arms = [("lora", "none", select_lora), ("lora", "same_adapter", select_lora),
            ("alora", "none", alora.__getitem__), ("alora", "base_prefix", alora.__getitem__)]
    lines = ["", f"# aLoRA prefix reuse: {len(convs)} conversations ({len(flat)} turns, {switches} capability switches), "
                 f"history = earlier prompts + reference answers; aLoRA specialists trained here "
                 f"({args.alora_steps or 'adapters.steps'} steps, {sum(cpu.values()):.0f} CPU-s); own-suite success "
                 f"aLoRA {' '.join(f'{c} {own[c]:.2f}' for c in caps)} · LoRA {' '.join(f'{c} {lora_own[c]:.2f}' for c in caps)}",
             f"{'rate/s':>7} {'arm':>18} {'prefill':>8} {'saved':>6} {'tok/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'batches':>8} "
             f"{'mean b':>6} {'success':>7} {'≠ alora/none':>12} {'load':>5}"]
    print("\n".join(lines), flush=True)
    for rate in args.rates:
        rng = np.random.default_rng(0)
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=len(flat)))
        results, loads = {}, {}
        for kind, reuse, select in arms:
            loads[(kind, reuse)] = os.getloadavg()[0]
            results[(kind, reuse)] = A.replay_conversations(select, kind, reuse, convs, arrivals, mnt, args.max_batch,
                                                            tok.eos_token_id, tok.pad_token_id, tok.bos_token_id, len(inv))
        ref, lora_reuse = results[("alora", "none")], results[("lora", "same_adapter")]["prefill_tokens"]
        for (kind, reuse), r in results.items():
            texts = [tok.decode(x, skip_special_tokens=True) for x in r["answers"]]
            ok = np.mean([W.verify(t["capability"], W.request_from_dict(t), x, world["tables"]) for t, x in zip(flat, texts)])
            differ = f"{sum(x != y for x, y in zip(r['answers'], ref['answers'])):12d}" if kind == "alora" else f"{'-':>12}"
            line = (f"{rate:7.0f} {kind + '/' + reuse:>18} {r['prefill_tokens']:8d} {1 - r['prefill_tokens'] / lora_reuse:6.0%} "
                    f"{r['tokens_per_s']:7.0f} {r['p50_ms']:7.0f} {r['p95_ms']:7.0f} {r['batches']:8d} {r['mean_batch']:6.1f} "
                    f"{ok:7.3f} {differ} {loads[(kind, reuse)]:5.2f}")
            print(line, flush=True)
            lines.append(line)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."), help="a work tree holding a finished mol_train@<seed>")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rates", type=float, nargs="+", default=[20.0, 80.0], help="arrivals per second")
    ap.add_argument("--requests", type=int, default=256, help="turns replayed per rate (cycled from the test conversations)")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--write", action="store_true", help=f"append the table to {RESULT.relative_to(ROOT)}")
    ap.add_argument("--prefix-reuse", action="store_true", help="also train aLoRA specialists and measure prefix reuse")
    ap.add_argument("--only-prefix-reuse", action="store_true", help="skip the policy table")
    ap.add_argument("--alora-steps", type=int, default=None, help="aLoRA training steps per specialist (default adapters.steps)")
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
    if args.only_prefix_reuse:
        lines = lines[:1]
    print("\n".join(lines), flush=True)
    for rate in ([] if args.only_prefix_reuse else args.rates):
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
    if args.prefix_reuse or args.only_prefix_reuse:
        lines += prefix_reuse(args.root.resolve(), args.seed, model, tok, mnt, caps, args)
    if args.write:
        with RESULT.open("a") as f:
            f.write("\n".join(lines) + "\n\n")
        print(f"appended to {RESULT}")


if __name__ == "__main__":
    main()
