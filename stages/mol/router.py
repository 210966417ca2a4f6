"""Stage mol_router: fit each per-turn router on the router's training conversations and route every
turn of the test conversations (with the confidence fallback to the previous turn's route)."""
from __future__ import annotations

import time

from paperworks.core.io import write_json
from paperworks.core.params import global_seed, load_section, read_params_file
from paperworks.core.seeding import derive_seed
from paperworks.core.stage import stage_main
from paperworks.mol.artifacts import ROUTER, read_world
from paperworks.mol.params import Params
from paperworks.mol.router import fit_router, route_conversations, turn_text


@stage_main
def main() -> None:
    p = load_section("mol", Params)
    seed = derive_seed(global_seed(read_params_file()), "mol", "router")
    world = read_world()
    train = world["router_train"]
    test = sorted(world["test_conversations"], key=lambda x: (x["conversation"], x["turn"]))
    routes, cpu = {}, {}
    for method in p.router.methods:
        t0 = time.process_time()
        router = fit_router(method, [turn_text(x) for x in train], [x["capability"] for x in train], seed)
        routes[method] = route_conversations(test, router([turn_text(x) for x in test]), p.router.confidence_threshold)
        cpu[method] = time.process_time() - t0
        acc = sum(r["route"] == r["capability"] for r in routes[method]) / len(test)
        print(f"{method}: per-turn routing accuracy {acc:.3f} on {len(test)} turns ({cpu[method]:.1f} CPU-s)")
    write_json(ROUTER / "routes.json", {"routes": routes, "cpu_s": cpu, "threshold": p.router.confidence_threshold})


if __name__ == "__main__":
    main()
