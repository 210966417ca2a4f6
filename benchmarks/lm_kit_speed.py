"""Training and generation throughput of the tiny-LM kit on this machine's CPU.

    python benchmarks/lm_kit_speed.py [--threads 2] [--steps 20]

Prints one row per model size: parameters, training tokens/s (SFT, batch 32, seq 64)
and generated tokens/s (batched sampling with KV cache, batch 64, 48 new tokens).
"""
from __future__ import annotations

import argparse
import string
import time

import torch

from paperworks.core.lm import LMConfig, TrainConfig, build_model, encode_sft, sample, train_sft, train_tokenizer

SIZES = {
    "selfdistill default (d96 L3)": LMConfig(hidden_size=96, num_layers=3, num_heads=4, intermediate_size=256, max_positions=128),
    "~1.1M (d128 L4)": LMConfig(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=384, max_positions=128),
    "~4M (d256 L4)": LMConfig(hidden_size=256, num_layers=4, num_heads=8, intermediate_size=768, max_positions=128),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    alphabet = string.ascii_lowercase + string.digits + "+-*=,;:>| "
    tok = train_tokenizer([alphabet])
    g = torch.Generator().manual_seed(0)
    rand = lambda n: "".join(alphabet[i] for i in torch.randint(len(alphabet), (n,), generator=g).tolist())  # noqa: E731
    prompts = [rand(16) for _ in range(256)]
    comps = [rand(47) for _ in range(256)]  # 1 + 16 + 47 + 1 = 65 ≈ seq 64
    data = encode_sft(tok, prompts, comps, 128)
    print(f"threads={args.threads}  vocab={len(tok)}")
    print("| model | params | train tok/s | gen tok/s |\n| --- | ---: | ---: | ---: |")
    for name, cfg in SIZES.items():
        model = build_model(cfg, len(tok), seed=0)
        n_params = sum(p.numel() for p in model.parameters())
        tc = TrainConfig(steps=args.steps, batch_size=32, warmup_steps=2, log_every=args.steps)
        t0 = time.perf_counter()
        train_sft(model, data, tc, desc=name)
        train_tps = args.steps * 32 * data["input_ids"].shape[1] / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        s = sample(model, tok, prompts[:64], 48, temperature=1.0)
        gen_tps = s.completion_ids.numel() / (time.perf_counter() - t0)
        print(f"| {name} | {n_params / 1e6:.2f}M | {train_tps:,.0f} | {gen_tps:,.0f} |")


if __name__ == "__main__":
    main()
