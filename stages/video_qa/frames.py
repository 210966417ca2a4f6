"""Stage video_qa_frames: pre-train the patchify frame encoder on per-frame truth, freeze it,
and cache the embeddings of every frame of every video (float16, content-hash keyed)."""
from __future__ import annotations

import time

import numpy as np

from paperworks.core.io import atomic_path, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.render.scene import Scene
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.video_qa.artifacts import FRAMES, PLOTS, encode_videos, read_world, save_model
from paperworks.video_qa.models import pretrain_encoder
from paperworks.video_qa.params import Params
from paperworks.video_qa.world import frame_targets, make_video


@stage_main
def main() -> None:
    p = load_section("video_qa", Params)
    seed = global_seed(read_params_file())
    _, _, specs = read_world()
    # Pre-training frames come from scenes of their own (never asked about): frames of one video
    # share a layout and objects, so a few hundred videos teach the encoder those scenes, not colours.
    rng = np.random.default_rng(derive_seed(seed, "video_qa", "pretrain_frames"))
    per_scene = -(-p.encoder.pretrain_frames // p.encoder.pretrain_scenes)
    t0 = time.process_time()
    parts = []
    for i in range(p.encoder.pretrain_scenes):
        spec = make_video(derive_seed(seed, "video_qa", "pretrain_scene", i) % 10**8, p.world)
        ts = np.sort(rng.choice(spec.n_frames, size=min(per_scene, spec.n_frames), replace=False))
        parts.append(frame_targets(Scene(spec, p.world.size, p.world.size), ts))
    frames, pairs, count = (np.concatenate(x)[: p.encoder.pretrain_frames] for x in zip(*parts))
    held = []
    for i in range(p.encoder.heldout_scenes):   # scenes never trained on: the curve the plateau check reads
        spec = make_video(derive_seed(seed, "video_qa", "heldout_scene", i) % 10**8, p.world)
        held.append(frame_targets(Scene(spec, p.world.size, p.world.size),
                                  np.sort(rng.choice(spec.n_frames, size=min(per_scene, spec.n_frames), replace=False))))
    heldout = tuple(np.concatenate(x) for x in zip(*held))
    t1 = time.process_time()
    featurizer, history = pretrain_encoder(frames, pairs, count, p.encoder, derive_seed(seed, "video_qa", "encoder"),
                                           heldout, live_dir=PLOTS / "live_encoder")
    t2 = time.process_time()
    with atomic_path(FRAMES) as tmp:  # the whole cache appears at once, or not at all
        save_model(tmp / "encoder.safetensors", featurizer)
        encode_videos(featurizer, specs, p.world.size, tmp)
    t3 = time.process_time()
    write_run_log("video_qa_frames", {"truth_frames": len(frames), "heldout_frames": len(heldout[0]), "render_truth_s": t1 - t0, "pretrain_s": t2 - t1,
                                      "encode_all_s": t3 - t2, "frames_encoded": sum(s.n_frames for s in specs.values())})
    print(f"encoder: loss {history[0]['loss']:.3f} → {history[-1]['loss']:.3f}, held-out {history[0]['heldout_loss']:.3f} → "
          f"{history[-1]['heldout_loss']:.3f}, held-out colour accuracy {history[-1]['heldout_colour_accuracy']:.2f}")


if __name__ == "__main__":
    main()
