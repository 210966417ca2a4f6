"""Stage mol_router: for each adapter seed, fit each per-turn router on that seed's own draw of router training
conversations (so the routers of two seeds are independent, like their specialists) and route every turn of the
test conversations (with the confidence fallback to the previous turn's route)."""
from __future__ import annotations

import time

from paperworks.core.io import write_json, write_run_log
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.mol.artifacts import ROUTER, read_world
from paperworks.mol.params import Params
from paperworks.mol.router import fit_router, route_conversations, turn_text
from paperworks.mol.world import router_train_draw


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    g = global_seed(read_params_file())
    world = read_world()
    test = sorted(world["test_conversations"], key=lambda x: (x["conversation"], x["turn"]))
    routes, cpu = {}, {}
    for adapter_seed in p.adapters.seeds:
        train = router_train_draw(p.world, g, adapter_seed, world)
        key = str(adapter_seed)
        routes[key], cpu[key] = {}, {}
        for method in p.router.methods:
            t0 = time.process_time()
            router = fit_router(method, [turn_text(x) for x in train], [x["capability"] for x in train],
                                derive_seed(g, "mol", "router", adapter_seed))
            routes[key][method] = route_conversations(test, router([turn_text(x) for x in test]), p.router.confidence_threshold)
            cpu[key][method] = time.process_time() - t0
            acc = sum(r["route"] == r["capability"] for r in routes[key][method]) / len(test)
            print(f"seed {adapter_seed} {method}: per-turn routing accuracy {acc:.3f} on {len(test)} turns "
                  f"({len(train)} training turns, {cpu[key][method]:.1f} CPU-s)")
    write_json(ROUTER / "routes.json", {"routes": routes, "train_turns": len(train), "threshold": p.router.confidence_threshold})
    write_run_log("mol_router", {"cpu_s": cpu})  # not in routes.json: a tracked output must be the same bytes on a rerun


if __name__ == "__main__":
    main()
