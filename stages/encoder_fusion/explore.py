"""Stage encoder_fusion_explore: the exploratory comparisons of the report decoder with a text prompt
(``paperworks.encoder_fusion.explore``): instruction retention after domain tuning with vs without
instruction data mixed in, and the segmentation tool's region text as the prompt vs none.

Reports are realised like the decoder stage's (training reports at ``decoder.paraphrase_rate`` from the
same seeds, test references at ``panel.paraphrase_rate`` from the same seeds); the domain-tuning reports at
``explore.domain_paraphrase_rate`` from their own seeds. The finding tagger is the panel's (same set, seed).

Explore seed i reads encoder draw ``head.seeds[i]`` (``params.encoder_draws``): that draw's cached tokens under every
decoder of seed i, and that draw's specialists as seed i's segmentation tool. One tokenizer covers every draw's tool text."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from paperworks.core.io import atomic_path, write_json, write_parquet, write_run_log
from paperworks.core.lm import save_tokenizer, train_tokenizer
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import EXPLORE, draw_tokens, encoder_dir, load_model, read_world
from paperworks.encoder_fusion.decoder import roi_f1
from paperworks.encoder_fusion.explore import (PromptedDecoder, compliance, encode_prompts, generate_prompted, make_data,
                                               prompt_width, prompted_config, target_width, train_prompted)
from paperworks.encoder_fusion.instructions import KINDS, PROMPTS, render
from paperworks.encoder_fusion.models import Specialist
from paperworks.encoder_fusion.params import MODALITIES, Params, encoder_draws
from paperworks.encoder_fusion.reports import FindingTagger, annotated_sentences, entity_f1, realise, score
from paperworks.encoder_fusion.tool import SegmentationTool

COMPLIANCE_SCHEMA = pa.schema([("arm", pa.string()), ("seed", pa.int64()), ("case_id", pa.string()), ("kind", pa.string()),
                               ("text", pa.string()), ("complies", pa.bool_())])
TOOL_SCHEMA = pa.schema([("arm", pa.string()), ("seed", pa.int64()), ("case_id", pa.string()), ("modality", pa.string()),
                         ("roi", pa.string()), ("reference", pa.string()), ("report", pa.string()), ("n_matched", pa.int64()),
                         ("n_missed", pa.int64()), ("n_hallucinated", pa.int64()), ("roi_f1", pa.float64())])
DOMAIN_SCHEMA = pa.schema([("arm", pa.string()), ("seed", pa.int64()), ("case_id", pa.string()), ("roi_f1", pa.float64())])


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    seed = global_seed(read_params_file())
    d, e = p.decoder, p.explore
    draws = encoder_draws(p, "explore")  # explore seed i reads encoder draw head.seeds[i] (ParamsError if too few)
    cases, _, _ = read_world()
    rows = {s: np.array([i for i, c in enumerate(cases) if c.split == s]) for s in ("train", "dev", "test")}
    test = [cases[i] for i in rows["test"]]

    def reports(split: str, stream: str, rate: float) -> list[str]:
        return [realise(cases[i].findings, cases[i].modality, np.random.default_rng(derive_seed(seed, "encoder_fusion", stream, cases[i].case_id)),
                        rate) for i in rows[split]]

    plain = {s: reports(s, "decoder_report", d.paraphrase_rate) for s in ("train", "dev")}      # as the decoder stage
    domain = {s: reports(s, "explore_domain", e.domain_paraphrase_rate) for s in ("train", "dev")}
    references = [realise(c.findings, c.modality, np.random.default_rng(derive_seed(seed, "encoder_fusion", "decoder_reference", c.case_id)),
                          p.panel.paraphrase_rate) for c in test]
    # --- the segmentation tool on every case, per explore seed: its encoder draw's specialist of the case's modality,
    # on that draw's cached tokens (each draw's tokens are read again in the seed loop: one draw in memory at a time)
    t0 = time.process_time()
    tool_text, tool_f1, tokens = [], [], None
    for draw in draws:
        tokens = draw_tokens(draw, like=tokens)
        tools = {m: SegmentationTool(load_model(encoder_dir(draw) / f"specialist_{m}.safetensors", Specialist(p.specialist)), m)
                 for m in MODALITIES}
        tool_out = [None] * len(cases)
        for m in MODALITIES:
            idx = np.array([i for i, c in enumerate(cases) if c.modality == m])
            for i, r in zip(idx, tools[m].from_tokens(tokens[m][torch.as_tensor(idx)])):
                tool_out[i] = r
        tool_text.append([r.text for r in tool_out])
        tool_f1.append(float(np.mean([entity_f1(list(tool_out[i].findings), list(cases[i].findings)) for i in rows["test"]])))
    tool_s = time.process_time() - t0
    # --- one tokenizer for everything the decoders read or write
    inst = {s: ([""] * len(plain[s]) + [PROMPTS[k] for k in KINDS for _ in plain[s]],
                plain[s] + [render(k, r) for k in KINDS for r in plain[s]]) for s in ("train", "dev")}
    corpus = (inst["train"][1] + domain["train"] + list(PROMPTS.values())
              + [texts[i] for texts in tool_text for i in rows["train"]])  # every seed's tool texts (its own draw's)
    tokenizer = train_tokenizer(corpus, vocab_size=d.vocab_size)
    # each comparison pads its prompts to its own width (the tool's region text is longer than an instruction)
    w_inst = prompt_width(tokenizer, list(PROMPTS.values()))
    w_tool = max(prompt_width(tokenizer, texts) for texts in tool_text)
    t_width = target_width(tokenizer, inst["train"][1] + inst["dev"][1] + domain["train"] + domain["dev"])
    grid = int(round(tokens["foundation"].shape[1] ** 0.5))
    cfg = {w: prompted_config(d.hidden_size, d.num_layers, d.num_heads, d.intermediate_size, grid * grid, w, t_width, d.max_new_tokens)
           for w in (w_inst, w_tool)}
    dims = {k: tokens[k].shape[2] for k in ("foundation", "xray", "path")}
    qdim = tokens["question_embeddings"].shape[1]

    def data(split: str, prompts: list[str], targets: list[str], width: int):
        reps = len(targets) // len(rows[split])
        return make_data(tokenizer, np.tile(rows[split], reps), prompts, targets, width, t_width)

    inst_data = {s: data(s, *inst[s], w_inst) for s in ("train", "dev")}
    dom_data = {s: data(s, [""] * len(domain[s]), domain[s], w_inst) for s in ("train", "dev")}
    test_ids = [c.case_id for c in test]
    tagger = FindingTagger().fit(*annotated_sentences(p.panel.tagger_sentences, derive_seed(seed, "encoder_fusion", "tagger")))
    domain_refs = [realise(c.findings, c.modality, np.random.default_rng(derive_seed(seed, "encoder_fusion", "explore_domain_ref", c.case_id)),
                           e.domain_paraphrase_rate) for c in test]
    comp_rows, tool_rows, domain_rows, histories, cost, pre_compliance = [], [], [], {}, {}, {}
    empty_test = encode_prompts(tokenizer, [""] * len(test), w_inst)
    for s in range(e.seeds):
        tokens = draw_tokens(draws[s], like=tokens)  # this seed's own encoder draw (and tool_text[s] its tool's text)
        # ---------------- 1. instruction retention
        run_seed = derive_seed(seed, "encoder_fusion", "explore_retention", s)
        t0 = time.process_time()
        model = PromptedDecoder(e.retention_fusion, dims, qdim, grid, p.head, cfg[w_inst], len(tokenizer), run_seed)
        histories[f"instruct-{s}"] = train_prompted(model, tokens, [(inst_data["train"], 1.0)], inst_data["dev"], e.instruct_steps,
                                                    d.batch_size, d.lr, e.log_every, run_seed, patience=e.instruct_patience)
        dev_comp = compliance(model, tokenizer, tokens, rows["dev"], [cases[i].case_id for i in rows["dev"]], KINDS, PROMPTS, w_inst,
                              d.max_new_tokens)
        pre_compliance[str(s)] = float(np.mean([r["complies"] for r in dev_comp]))
        tuned = {k: v.detach().clone() for k, v in model.state_dict().items()}
        cost[f"instruct-{s}"] = time.process_time() - t0
        for arm, sources in (("domain_only", [(dom_data["train"], 1.0)]),
                             ("mixed", [(dom_data["train"], 1.0 - e.mix_share), (inst_data["train"], e.mix_share)])):
            t0 = time.process_time()
            model.load_state_dict(tuned)
            histories[f"{arm}-{s}"] = train_prompted(model, tokens, sources, dom_data["dev"], e.domain_steps, d.batch_size, d.lr,
                                                     e.log_every, derive_seed(run_seed, "encoder_fusion", "domain", s))
            comp_rows += [{"arm": arm, "seed": s, **r} for r in compliance(model, tokenizer, tokens, rows["test"], test_ids, KINDS,
                                                                         PROMPTS, w_inst, d.max_new_tokens)]
            reps = generate_prompted(model, tokenizer, tokens, rows["test"], empty_test, d.max_new_tokens)
            domain_rows += [{"arm": arm, "seed": s, "case_id": c.case_id,
                             "roi_f1": roi_f1(score(r, ref, c.roi, tagger, p.panel.metric_roi_weight), c.roi, p.panel.metric_roi_weight)}
                            for c, r, ref in zip(test, reps, domain_refs)]
            cost[f"{arm}-{s}"] = time.process_time() - t0
            got = [r["complies"] for r in comp_rows if r["arm"] == arm and r["seed"] == s]
            print(f"retention {arm} seed {s} (encoders of seed {draws[s]}): compliance {np.mean(got):.3f} (after instruction tuning: {pre_compliance[str(s)]:.3f})")
        # ---------------- 2. tool use vs none
        run_seed = derive_seed(seed, "encoder_fusion", "explore_tool", s)
        for arm in ("none", "tool"):
            t0 = time.process_time()
            model = PromptedDecoder(e.tool_fusion, dims, qdim, grid, p.head, cfg[w_tool], len(tokenizer), run_seed)
            sel = {sp: [tool_text[s][i] if arm == "tool" else "" for i in rows[sp]] for sp in ("train", "dev", "test")}
            histories[f"{arm}-{s}"] = train_prompted(model, tokens, [(data("train", sel["train"], plain["train"], w_tool), 1.0)],
                                                     data("dev", sel["dev"], plain["dev"], w_tool), e.tool_steps, d.batch_size, d.lr,
                                                     e.log_every, run_seed)
            reps = generate_prompted(model, tokenizer, tokens, rows["test"], encode_prompts(tokenizer, sel["test"], w_tool),
                                     d.max_new_tokens)
            for c, r, ref in zip(test, reps, references):
                sc = score(r, ref, c.roi, tagger, p.panel.metric_roi_weight)
                tool_rows.append({"arm": arm, "seed": s, "case_id": c.case_id, "modality": c.modality, "roi": c.roi, "reference": ref,
                                  "report": r, "n_matched": len(sc.matched), "n_missed": len(sc.missed),
                                  "n_hallucinated": len(sc.hallucinated), "roi_f1": roi_f1(sc, c.roi, p.panel.metric_roi_weight)})
            cost[f"{arm}-{s}"] = time.process_time() - t0
            got = [r["roi_f1"] for r in tool_rows if r["arm"] == arm and r["seed"] == s]
            print(f"tool use {arm} ({e.tool_fusion}) seed {s} (encoders of seed {draws[s]}): test RoI-F1 {np.mean(got):.3f}, {cost[f'{arm}-{s}']:.1f} CPU-s")
    tool_examples = [{"case_id": cases[i].case_id, "encoder_seed": draws[0], "tool_text": tool_text[0][i],
                      "truth": [f"{f.size} {f.type} in the {f.region}" for f in cases[i].findings]} for i in rows["test"][:3]]
    with atomic_path(EXPLORE) as tmp:
        write_parquet(tmp / "compliance.parquet", pd.DataFrame(comp_rows), COMPLIANCE_SCHEMA)
        write_parquet(tmp / "tool_reports.parquet", pd.DataFrame(tool_rows), TOOL_SCHEMA)
        write_parquet(tmp / "domain_reports.parquet", pd.DataFrame(domain_rows), DOMAIN_SCHEMA)
        write_json(tmp / "histories.json", histories)
        write_json(tmp / "explore.json", {"instruction_compliance_before_domain_tuning": pre_compliance,
                                          "n_dev_instruction_items": len(rows["dev"]) * len(KINDS),
                                          # the worst seed's tool (each seed's tool is its own encoder draw's specialists)
                                          "tool_entity_f1_test": min(tool_f1),
                                          "tool_entity_f1_test_per_seed": {str(s): v for s, v in enumerate(tool_f1)},
                                          "encoder_seeds": {str(s): draw for s, draw in enumerate(draws)},
                                          "tool_examples": tool_examples,
                                          "prompt_tokens": {"instructions": w_inst, "tool": w_tool}, "vocab": len(tokenizer),
                                          "lm_config": cfg[w_tool].model_dump(),
                                          "mix_share": e.mix_share, "domain_paraphrase_rate": e.domain_paraphrase_rate,
                                          "retention_fusion": e.retention_fusion, "tool_fusion": e.tool_fusion})
        save_tokenizer(tokenizer, tmp / "tokenizer.json")
    write_run_log("encoder_fusion_explore", {"process_s": cost, "tool_s": tool_s})


if __name__ == "__main__":
    main()
