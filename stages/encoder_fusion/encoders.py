"""Stage encoder_fusion_encoders@<seed>: that seed's foundation encoder F (CLIP-style on the 2× coarse view against
frozen MiniLM embeddings of each training case's finding sentence; its plateau curve is the loss on
the dev cases), one specialist per 2D modality
(full resolution, dense per-cell labels of its own modality), then the frozen token grids of every
case, MiniLM embeddings of the question texts and the small-lesion detection probe (precondition).

One stage per seed of ``encoder_fusion.head.seeds`` (each seed's heads train on its own encoders, so the
claims' intervals over seeds cover a redraw of the frozen encoders too), and one stage rather than three per
seed: each part takes seconds, and a process start (torch + MiniLM) costs about as much."""
from __future__ import annotations

import time

import numpy as np
import torch

from paperworks.core.io import atomic_path, save_safetensors, write_json, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.core.vision.text import encode_texts
from paperworks.encoder_fusion.artifacts import encoder_dir, features_dir, read_world, save_model
from paperworks.encoder_fusion.models import build_foundation, token_grid, train_foundation, train_specialist
from paperworks.encoder_fusion.params import MODALITIES, Params, stage_seed
from paperworks.encoder_fusion.pipeline import detection_probe, question_table
from paperworks.encoder_fusion.world import caption, coarse_view


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    s = stage_seed(p)
    seed = global_seed(read_params_file())
    cases, images, dense = read_world()
    log = {}
    # --- foundation F
    t0 = time.process_time()
    train = [i for i, c in enumerate(cases) if c.split == "train"]
    held = [i for i, c in enumerate(cases) if c.split == "dev"]
    distinct = sorted({caption(cases[i]) for i in train + held})
    index = {c: k for k, c in enumerate(distinct)}
    text_table = torch.from_numpy(encode_texts(distinct))
    f_seed = derive_seed(seed, "encoder_fusion", "foundation", s)
    clip = build_foundation(p.foundation, text_table.shape[1], f_seed)
    f_hist = train_foundation(clip, coarse_view(images[train]), np.array([index[caption(cases[i])] for i in train]),
                              coarse_view(images[held]), np.array([index[caption(cases[i])] for i in held]), text_table,
                              p.foundation, f_seed)
    clip.eval()
    log["foundation_s"] = time.process_time() - t0
    print(f"seed {s} foundation: {len(train)} images, {len(distinct)} distinct captions, held-out loss "
          f"{f_hist[0]['heldout_loss']:.3f} → {min(r['heldout_loss'] for r in f_hist):.3f} (min) → {f_hist[-1]['heldout_loss']:.3f}")
    # --- specialists
    specialists, s_hist = {}, {}
    for m in MODALITIES:
        t0 = time.process_time()
        tr = [i for i, c in enumerate(cases) if c.split == "train" and c.modality == m]
        dv = [i for i, c in enumerate(cases) if c.split == "dev" and c.modality == m]
        specialists[m], s_hist[m] = train_specialist(images[tr], dense[tr], images[dv], dense[dv], p.specialist,
                                                     derive_seed(seed, "encoder_fusion", "specialist", m, s))
        log[f"specialist_{m}_s"] = time.process_time() - t0
        h = s_hist[m]
        print(f"specialist {m}: held-out loss {h[0]['heldout_loss']:.3f} → {h[-1]['heldout_loss']:.3f}, "
              f"cell accuracy {h[-1]['heldout_cell_accuracy']:.3f}")
    # --- frozen tokens, question embeddings, detection probe
    t0 = time.process_time()
    tokens = {"foundation": token_grid(clip.image_encoder, coarse_view(images))}
    for m in MODALITIES:
        tokens[m] = token_grid(specialists[m].encoder, images)
    texts, _ = question_table(cases)
    tokens["question_embeddings"] = torch.from_numpy(encode_texts(texts))
    probe = detection_probe(cases, tokens)
    log["tokens_probe_s"] = time.process_time() - t0
    with atomic_path(encoder_dir(s)) as tmp:
        save_model(tmp / "foundation.safetensors", clip.image_encoder)
        for m in MODALITIES:
            save_model(tmp / f"specialist_{m}.safetensors", specialists[m])
        write_json(tmp / "histories.json", {"foundation": f_hist, **{f"specialist_{m}": h for m, h in s_hist.items()}})
    with atomic_path(features_dir(s)) as tmp:
        save_safetensors(tmp / "tokens.safetensors", tokens)
        write_json(tmp / "questions.json", texts)
        write_json(tmp / "detection_probe.json", probe)
    write_run_log(f"encoder_fusion_encoders_{s}", log)
    for m, r in probe.items():
        print(f"small-lesion detection ({m}): foundation {r['foundation']:.3f}, specialist {r['specialist']:.3f}")


if __name__ == "__main__":
    main()
