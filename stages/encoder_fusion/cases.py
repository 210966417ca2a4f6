"""Stage encoder_fusion_cases: the synthetic cases (x-ray-like and pathology-like images, findings,
clinical context, dense cell labels), deterministic from the seed."""
from __future__ import annotations

import collections

import torch

from paperworks.core.io import atomic_path, save_safetensors, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.stage import stage_main
from paperworks.encoder_fusion.artifacts import WORLD
from paperworks.encoder_fusion.params import Params
from paperworks.encoder_fusion.world import build_world


@stage_main
def main() -> None:
    p = load_section("encoder_fusion", Params)
    seed = global_seed(read_params_file())
    cases, images, dense = build_world(p.world, seed)
    with atomic_path(WORLD) as tmp:  # the whole folder appears at once, or not at all
        save_safetensors(tmp / "images.safetensors", {"images": torch.from_numpy(images), "dense": torch.from_numpy(dense)})
        write_json(tmp / "cases.json", [c.to_record() for c in cases])
    sizes = collections.Counter((c.modality, f.size) for c in cases for f in c.findings)
    print(f"{len(cases)} cases, lesions by (modality, size): {dict(sorted(sizes.items()))}")


if __name__ == "__main__":
    main()
