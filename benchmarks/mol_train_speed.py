"""Speed of one mol adapter SFT step at the default profile's sizes: padded core ``sft_loss`` vs the packed loss.

Builds the world and the tokenizer as ``mol_data`` does (default profile), a base of the default size (random
weights: the speed of a step does not depend on them), and times ``train_sft`` steps of a rank-8 specialist on each
capability's training items and of the rank-32 single LoRA on the mixture, with the core padded ``sft_loss`` (a batch
cut to its longest row, the LM head over every position, which mol trains with) and with protocol_distill's
``packed_sft_loss`` (length-sorted chunks of 8, the head on labelled positions only). It also prints how much of each
padded batch is padding and how much carries a label: the work the packed loss could save.
With ``--profile`` it then splits one agent-specialist step (padded loss) into forward, backward and clipping + AdamW,
and prints the torch profiler's top operators over 10 steps.
Run: `PAPERWORKS_THREADS=1 python benchmarks/mol_train_speed.py [--profile]` (from the repo root).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import yaml  # noqa: E402

from paperworks.core.lm import TrainConfig, build_model, encode_sft, make_optimizer, train_tokenizer, train_sft  # noqa: E402
from paperworks.core.lm.train import sft_loss  # noqa: E402
from paperworks.protocol_distill.train import packed_sft_loss  # noqa: E402  (the one implementation; protocol_distill trains with it)
from paperworks.mol import world as W  # noqa: E402
from paperworks.mol.models import lora_model  # noqa: E402
from paperworks.mol.params import Params  # noqa: E402

STEPS = 40


def batch_shares(data: dict[str, torch.Tensor], batch_size: int, batches: int = 50) -> tuple[float, float]:
    """Over random batches cut to their longest row: the share of positions that are padding, and that carry a label."""
    g = torch.Generator().manual_seed(0)
    pad = lab = total = 0
    for _ in range(batches):
        idx = torch.randperm(data["input_ids"].shape[0], generator=g)[:batch_size]
        mask = data["attention_mask"][idx]
        width = int(mask.sum(1).max())
        total += mask.shape[0] * width
        pad += int((mask[:, :width] == 0).sum())
        lab += int((data["labels"][idx, 1:width] != -100).sum())
    return pad / total, lab / total


def profile_step(model, data: dict[str, torch.Tensor], batch_size: int, lr: float) -> None:
    """Forward / backward / clipping + AdamW of the padded step, mean over 30 steps, then the profiler's top operators."""
    from torch.profiler import ProfilerActivity, profile

    opt, _ = make_optimizer(model, TrainConfig(steps=1, batch_size=batch_size, lr=lr))
    g = torch.Generator().manual_seed(0)

    def step() -> tuple[float, float, float]:
        idx = torch.randperm(data["input_ids"].shape[0], generator=g)[:batch_size]
        batch = {k: v[idx] for k, v in data.items()}
        width = int(batch["attention_mask"].sum(1).max())
        batch = {k: v[:, :width] for k, v in batch.items()}
        t0 = time.perf_counter()
        loss = sft_loss(model, batch)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    for _ in range(5):
        step()
    parts = torch.tensor([step() for _ in range(30)]).mean(0) * 1000
    print(f"agent specialist, padded step: forward {parts[0]:.1f} ms, backward {parts[1]:.1f} ms, clip + AdamW {parts[2]:.1f} ms")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", action="store_true", help="also split one step and print the profiler's top operators")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("PAPERWORKS_THREADS", "1")))
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf/default/mol.yaml").read_text())
    p = Params.model_validate(conf)
    world = W.build_world(p.world, 0)
    tok = train_tokenizer(world["corpus_train"], vocab_size=p.tokenizer.vocab_size)
    base = build_model(p.base.model, len(tok), seed=0)
    for param in base.parameters():
        param.requires_grad_(False)
    a = p.adapters
    sets = {cap: world["train"][cap] for cap in W.CAPABILITIES}
    sets["mixture"] = [x for cap in W.CAPABILITIES for x in world["train"][cap]]
    print(f"{'training set':14s} {'adapter':8s} {'pad share':>9s} {'labelled':>9s} {'padded ms/step':>15s} {'packed ms/step':>15s}")
    for name, items in sets.items():
        data = encode_sft(tok, [x["prompt"] for x in items], [x["target"] for x in items], p.base.model.max_positions)
        pad, lab = batch_shares(data, a.batch_size)
        rank = a.rank * (len(W.CAPABILITIES) if name == "mixture" else 1)
        timings = []
        for loss_fn in (None, packed_sft_loss):
            model = lora_model(base, rank, a.alpha_over_rank, seed=0)
            cfg = TrainConfig(steps=STEPS, batch_size=a.batch_size, lr=a.lr, warmup_steps=0, log_every=STEPS)
            train_sft(model, data, cfg, seed=0, loss_fn=loss_fn, desc=None)  # warm-up: allocator, kernels
            model = lora_model(base, rank, a.alpha_over_rank, seed=0)
            t = time.perf_counter()
            train_sft(model, data, cfg, seed=0, loss_fn=loss_fn, desc=None)
            timings.append(1000 * (time.perf_counter() - t) / STEPS)
        print(f"{name:14s} {'r' + str(rank):8s} {pad:9.1%} {lab:9.1%} {timings[0]:15.1f} {timings[1]:15.1f}")
    print(f"threads {torch.get_num_threads()}, {STEPS} steps × batch {a.batch_size} per timing (after one warm-up run)")
    if args.profile:
        items = world["train"]["agent"]
        data = encode_sft(tok, [x["prompt"] for x in items], [x["target"] for x in items], p.base.model.max_positions)
        profile_step(lora_model(base, a.rank, a.alpha_over_rank, seed=0), data, a.batch_size, a.lr)


if __name__ == "__main__":
    main()
