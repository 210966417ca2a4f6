"""Speed and peak memory of the protocol_distill pieces at the default profile's model sizes.

Prints one table: rollout throughput (tool-interleaved, KV cache) and one online update per method
(GRPO, OPSD/MAPD with the extra privileged forward), the warm-start SFT step (the core padded
``sft_loss`` and the track's ``packed_sft_loss``, which the stages use), and the process's
peak resident memory. Run: `python benchmarks/protocol_distill_speed.py` (from the repo root).
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import yaml  # noqa: E402

from paperworks.core.lm import LMConfig, TrainConfig, build_model, train_sft  # noqa: E402
from paperworks.protocol_distill.demos import encode_prompt, online_items, valid_protocols, warm_start_examples  # noqa: E402
from paperworks.protocol_distill.episode import Codec, build_word_tokenizer  # noqa: E402
from paperworks.protocol_distill.params import Params  # noqa: E402
from paperworks.protocol_distill.protocol import protocol_to_context  # noqa: E402
from paperworks.protocol_distill.rollout import rollout  # noqa: E402
from paperworks.protocol_distill.search import SearchTool  # noqa: E402
from paperworks.protocol_distill.teacher import TEACHERS, run_teacher  # noqa: E402
from paperworks.protocol_distill.train import OnlineConfig, packed_sft_loss, sft_batch, train_online  # noqa: E402
from paperworks.protocol_distill.world import WorldConfig, build_world, make_questions  # noqa: E402

import json  # noqa: E402


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf/default/protocol_distill.yaml").read_text())
    torch.set_num_threads(int(__import__("os").environ.get("PAPERWORKS_THREADS", "2")))
    # the world exactly as the generate stage builds it from the default profile
    w = Params.model_validate(conf).world
    cfg = WorldConfig(w.n_persons, w.n_orgs, w.n_cities, w.n_collisions, w.doc_forms, w.redirect_share(), w.transfer_share(),
                      w.questions.model_dump())
    rows = []
    t = time.perf_counter()
    world = build_world(cfg, 0)
    questions = make_questions(world, cfg, 0)
    tool = SearchTool(world.docs)
    prot_rows = [r for name in TEACHERS for r in run_teacher(world, tool, questions, TEACHERS[name], 0)]
    rows.append(("world + 3 teachers", f"{len(questions)} questions", time.perf_counter() - t, ""))
    texts = world.docs + [q.text for q in questions] + [r["trace"] for r in prot_rows]
    texts += [protocol_to_context(json.loads(r["protocol_json"])) for r in prot_rows if r["valid"]]
    codec = Codec(build_word_tokenizer(texts + ["[ref] [/ref]"]))
    qdicts = [dict(vars(q)) for q in questions]
    prots = valid_protocols(prot_rows)
    warm = [q for q in qdicts if q["pool"] == "warm"]
    online = [q for q in qdicts if q["pool"] == "online"]
    for size in ("tiny", "small"):
        lm = LMConfig(**conf["models"][size])
        model = build_model(lm, len(codec), seed=0)
        n_params = sum(p.numel() for p in model.parameters())
        prompts, comps, _ = warm_start_examples(codec, tool, warm, prots, list(TEACHERS), conf["warmstart"]["mix"], 0)
        data = sft_batch(codec, prompts, comps, lm.max_positions)
        steps = 20
        for loss_name, loss_fn in (("padded sft_loss", None), ("packed_sft_loss", packed_sft_loss)):
            model = build_model(lm, len(codec), seed=0)
            t = time.perf_counter()
            train_sft(model, data, TrainConfig(steps=steps, batch_size=conf["warmstart"]["batch_size"], lr=1e-3, warmup_steps=0,
                                               log_every=steps), loss_fn=loss_fn)
            dt = time.perf_counter() - t
            rows.append((f"{size} ({n_params / 1e6:.2f}M) warm-start SFT, {loss_name}", f"{steps} steps × {conf['warmstart']['batch_size']}",
                         dt, f"{1000 * dt / steps:.0f} ms/step"))
        batch = [encode_prompt(codec, q["text"]) for q in online[:64]]
        t = time.perf_counter()
        ro = rollout(model, codec, batch, tool, conf["rollout"]["max_completion"], conf["rollout"]["max_searches"],
                     generator=torch.Generator().manual_seed(0))
        dt = time.perf_counter() - t
        n_tok = int(ro.completion_mask.sum())
        rows.append((f"{size} rollout (KV cache, tool calls)", f"64 episodes, {n_tok} tokens", dt, f"{n_tok / dt:.0f} tokens/s"))
        o = conf["online"]
        for method, ctx in (("grpo", "none"), ("opsd", "answer"), ("mapd", "protocol")):
            items = online_items(codec, online, prots, ctx, "opus")
            ocfg = OnlineConfig(method=method, steps=3, prompts_per_step=o["prompts_per_step"], group_size=o["group_size"],
                                lr=o["lr"], max_completion=conf["rollout"]["max_completion"], max_searches=conf["rollout"]["max_searches"])
            t = time.perf_counter()
            train_online(model, codec, tool, items, ocfg, seed=0)
            dt = time.perf_counter() - t
            rows.append((f"{size} online update ({method})", f"3 steps × {o['prompts_per_step']}×{o['group_size']} episodes", dt,
                         f"{dt / 3:.2f} s/step"))
    print(f"{'what':56s} {'work':30s} {'seconds':>8s}  rate")
    for what, work, sec, rate in rows:
        print(f"{what:56s} {work:30s} {sec:8.2f}  {rate}")
    print(f"peak resident memory of this process: {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
