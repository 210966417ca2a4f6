"""Stage eval_agent_tools: fit the tool heads on families A and B; accuracy per family and head."""
from __future__ import annotations

import torch

from paperworks.core.io import save_safetensors, write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.eval_agent.artifacts import LIVE_TOOLS, TOOL_WEIGHTS, TOOLS, read_zoo
from paperworks.eval_agent.params import Params
from paperworks.eval_agent.tools import head_accuracy, read_detections, tool_set, train_tools
from paperworks.eval_agent.world import FAMILIES, KNOWN_FAMILIES


@stage_main
def main() -> None:
    p = load_section("eval_agent", Params)
    seed = global_seed(read_params_file())
    torch.set_num_threads(1)
    zoo, _ = read_zoo()
    population = [g for g in zoo if g.role == "population" and g.family in KNOWN_FAMILIES]
    nm = p.zoo.noise_max
    train = tool_set(population, p.tools.n_train, derive_seed(seed, "eval_agent", "tools", "train"), nm)
    heldout = tool_set(population, p.tools.n_heldout, derive_seed(seed, "eval_agent", "tools", "heldout"), nm)
    from dvclive import Live
    live = Live(str(LIVE_TOOLS), dvcyaml=False, save_dvc_exp=False, report=None)
    model, rows = train_tools(p.tools, train, heldout, nm, derive_seed(seed, "eval_agent", "tools", "fit"), live)
    live.end()
    accuracy = {}
    for fam in FAMILIES:  # generators the heads never saw: in-family (A, B) and held-out (C)
        gens = [g for g in zoo if g.family == fam and g.role != "population"]
        s = tool_set(gens, p.tools.n_heldout, derive_seed(seed, "eval_agent", "tools", "family", fam), nm)
        accuracy[fam] = head_accuracy(read_detections(model, s.detections, s.image_features, nm), s.truths, p.zoo.quality_threshold)
    save_safetensors(TOOL_WEIGHTS, {k: v.detach().contiguous() for k, v in model.state_dict().items()})
    write_json(TOOLS / "accuracy.json", {"per_family": accuracy, "train_components": int(len(train.comp_shape)),
                                         "unmatched_components": float((train.comp_shape < 0).mean()), "curve": rows})
    for fam, acc in accuracy.items():
        print(fam, {k: round(v, 3) for k, v in acc.items()})


if __name__ == "__main__":
    main()
